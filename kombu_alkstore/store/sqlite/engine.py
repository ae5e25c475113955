"""The SQLite engine as it describes itself to the shared store code (see
:mod:`..engines`): imports no driver; its hooks import sqlite3 when they run."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ..engines import Engine

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from ..interface import Store
    from ..migrate import Migrations


def _store_class() -> type[Store]:
    from .store import SQLiteStore

    return SQLiteStore


def _check_url(url: URL, given: Any = None) -> None:
    """A file, and no query parameters (options go in ``broker_transport_options``)."""
    if url.query:
        raise ConfigurationError(
            f"bad database URL {url.render_as_string()!r}: SQLite takes no query "
            f"parameters, got {', '.join(sorted(url.query))} (set options such as "
            "busy_timeout in broker_transport_options)"
        )
    if not url.database or url.database == ":memory:":
        raise ConfigurationError(
            f"bad database URL {str(url if given is None else given)!r}: SQLite needs a "
            "file (sqlite:///path.db); an in-memory database cannot be shared by a worker "
            "and its clients"
        )


def _conninfo(url: URL) -> str:
    """The database file's path: what ``sqlite3.connect`` takes."""
    return url.database or ""


def _script(
    found: Migrations, existing: dict[str, set[str]] | None, stored_name: Callable[[str], str]
) -> list[str]:
    from .script import script

    return script(found, existing, stored_name)


def _table_queue(store: Any, spec: Any) -> Any:
    from .tables import SQLiteTableQueue

    return SQLiteTableQueue(store, spec)


ENGINE = Engine(
    name="sqlite",
    title="SQLite",
    schemes=frozenset({"sqlite", "sqlite+pysqlite"}),
    example="sqlite:///…",
    migrations=f"{__package__}.migrations",
    store_class=_store_class,
    check_url=_check_url,
    script=_script,
    conninfo=_conninfo,
    file=True,
    table_queue=_table_queue,
)
