"""The setup script a migration role applies (``kombu-alkstore setup --print``)."""

from __future__ import annotations

from ..errors import ConfigurationError
from .engines import titles
from .options import StoreURL, validate_identifier
from .schema import ddl_script


def setup_script(url: StoreURL, schema: str, grant: str | None = None) -> str:
    """The idempotent DDL for ``schema`` on ``url``'s engine, and with ``grant`` the
    least privileges that runtime role needs (engines with roles: PostgreSQL; a bad
    ``grant`` is refused before anything is printed)."""
    validate_identifier(schema, "schema")
    engine = url.description
    extra = ""
    if grant is not None:  # checked before anything is printed
        if engine.grants is None:
            raise ConfigurationError(
                f"--grant applies to {titles(lambda e: e.grants)} only "
                f"({engine.title} has no roles)"
            )
        extra = engine.grants(schema, grant)
    return (
        f"-- kombu-alkstore DDL for {url.engine}, schema {schema!r}\n"
        "-- idempotent: safe to apply again (IF NOT EXISTS, ON CONFLICT, a version that "
        "only moves forward)\n\n" + ddl_script(schema, url.engine) + extra
    )
