"""The setup script a migration role applies (``kombu-alkstore setup --print``)."""

from __future__ import annotations

from ..errors import ConfigurationError
from .options import StoreURL, validate_identifier
from .schema import ddl_script
from .sqlfile import load_queries


def setup_script(url: StoreURL, schema: str, grant: str | None = None) -> str:
    """The idempotent DDL for ``schema`` on ``url``'s engine, and with ``grant`` the
    least privileges that runtime role needs (PostgreSQL: SQLite has no roles)."""
    validate_identifier(schema, "schema")
    extra = ""
    if grant is not None:  # checked before anything is printed
        if url.engine != "postgresql":
            raise ConfigurationError("--grant applies to PostgreSQL only (SQLite has no roles)")
        extra = _grants(schema, grant)
    return (
        f"-- kombu-alkstore DDL for {url.engine}, schema {schema!r}\n"
        "-- idempotent: safe to apply again (IF NOT EXISTS, ON CONFLICT, a version that "
        "only moves forward)\n\n" + ddl_script(schema, url.engine) + extra
    )


def _grants(schema: str, role: str) -> str:
    """The least privileges a runtime role needs when the tables were made by a migration."""
    validate_identifier(role, "role")
    names = {"schema": f'"{schema}"', "role": f'"{role}"'}
    grants = load_queries("kombu_alkstore.store.postgres", "grants.sql", names, ["grants"])
    return (
        f"-- the runtime role {role!r}: read/write rows, no DDL (connect with setup=False)\n"
        + grants["grants"]
        + ";\n"
    )
