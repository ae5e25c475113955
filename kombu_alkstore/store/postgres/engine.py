"""The PostgreSQL engine as it describes itself to the shared store code (see
:mod:`..engines`): imports no driver; its hooks import psycopg when they run."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engines import Engine

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from ..interface import Store
    from ..migrate import Migrations


def _store_class() -> type[Store]:
    from .store import PostgresStore

    return PostgresStore


def _check_url(url: URL, given: Any = None) -> None:
    from .conninfo import check_url

    check_url(url, given)


def _conninfo(url: URL) -> str:
    from .conninfo import conninfo

    return conninfo(url)


def _script(
    found: Migrations, existing: dict[str, set[str]] | None, stored_name: Callable[[str], str]
) -> list[str]:
    """Every migration in order (each is idempotent: ``IF NOT EXISTS`` throughout, ``ADD
    COLUMN IF NOT EXISTS``), then the version; ``existing`` is not needed."""
    out = [stmt for m in found.migrations for stmt in m.statements]
    out.append(found.record(found.latest))
    return out


def _grants(schema: str, role: str) -> str:
    """The least privileges a runtime role needs when the tables were made by a migration."""
    from ..options import validate_identifier
    from ..sqlfile import load_queries

    validate_identifier(role, "role")
    names = {"schema": f'"{schema}"', "role": f'"{role}"'}
    grants = load_queries(__package__, "grants.sql", names, ["grants"])
    return (
        f"-- the runtime role {role!r}: read/write rows, no DDL (connect with setup=False)\n"
        + grants["grants"]
        + ";\n"
    )


def _close_all() -> None:
    from .waiter import close_all_waiters

    close_all_waiters()


def _table_queue(store: Any, spec: Any) -> Any:
    from .tables import PostgresTableQueue

    return PostgresTableQueue(store, spec)


ENGINE = Engine(
    name="postgresql",
    title="PostgreSQL",
    schemes=frozenset({"postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"}),
    example="postgresql://…",
    migrations=f"{__package__}.migrations",
    store_class=_store_class,
    check_url=_check_url,
    script=_script,
    conninfo=_conninfo,
    schemas=True,
    grants=_grants,
    listen_url=True,
    close_all=_close_all,
    table_queue=_table_queue,
)
