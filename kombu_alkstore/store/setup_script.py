"""The setup script a migration role applies (``kombu-alkstore setup --print``)."""

from __future__ import annotations

from ..errors import ConfigurationError
from .options import StoreURL, validate_identifier
from .schema import ddl_script


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
        "-- idempotent: every statement is IF NOT EXISTS / ON CONFLICT DO NOTHING\n\n"
        + ddl_script(schema, url.engine)
        + extra
    )


def _grants(schema: str, role: str) -> str:
    """The least privileges a runtime role needs when the tables were made by a migration."""
    validate_identifier(role, "role")
    return (
        f"-- the runtime role {role!r}: read/write rows, no DDL (connect with setup=False)\n"
        f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}";\n'
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}";\n'
        f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}";\n'
        f"-- tables a later migration adds (run by the same migration role) get them too\n"
        f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" '
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "{role}";\n'
        f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" '
        f'GRANT USAGE, SELECT ON SEQUENCES TO "{role}";\n'
    )
