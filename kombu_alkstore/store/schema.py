"""The store's table names for one schema on one engine, and the printed setup script.

The layout itself is written once, as each engine's numbered migrations
(``store/<engine>/migrations/NNNN_*.sql``, run by :mod:`.migrate`); nothing here
describes a column. PostgreSQL keeps the tables in an engine-owned schema
(``alkstore.jobs``); SQLite has no schemas, so the same name becomes a table prefix
(``alkstore_jobs``), index names included.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, fields

from ..errors import SchemaMissing
from .migrate import ENGINE_PACKAGES, LATEST, Migrations
from .options import validate_identifier

#: The newest schema version, stored in the ``meta`` table: the number of the newest
#: migration file (the same on every engine). 1: the queue tables; 2: the waiters table
#: (hand-off to idle consumers); 3: offers (one per channel, its slots shared by its
#: queues) instead of waiters; paused_queues, rates and the dead_died index (the
#: dashboard); the beat's schedule columns; jobs.revoked_at.
SCHEMA_VERSION = LATEST["postgresql"]
if set(LATEST.values()) != {SCHEMA_VERSION}:  # a packaging defect
    raise RuntimeError(f"the engines' migrations end at different versions: {LATEST}")

#: Tables an earlier version made and the current one no longer uses; only the
#: migrations name them (a database upgraded from version 2 still has ``waiters``).
RETIRED_TABLES = ("waiters",)


@dataclass(frozen=True)
class Table:
    """One table: ``name`` as stored (``jobs`` inside ``schema`` on PostgreSQL,
    ``alkstore_jobs`` on SQLite, where ``schema`` is None)."""

    key: str
    name: str
    schema: str | None = None


@dataclass(frozen=True)
class Tables:
    """The store's tables for one schema name on one engine."""

    jobs: Table
    dead: Table
    exchanges: Table
    bindings: Table
    queues: Table
    schedules: Table
    leases: Table
    meta: Table
    offers: Table
    paused_queues: Table
    rates: Table

    def all(self) -> tuple[Table, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def names(self) -> dict[str, str]:
        """Every table's short name (``jobs``) and its name as written in SQL."""
        return {t.key: self.qualified(t) for t in self.all()}

    def qualified(self, table: Table) -> str:
        """The table name as written in SQL (quoted, schema-qualified on PostgreSQL)."""
        if table.schema:
            return f'"{table.schema}"."{table.name}"'
        return f'"{table.name}"'


def _table(schema: str, engine: str, key: str) -> Table:
    if engine == "postgresql":
        return Table(key, key, schema)
    return Table(key, f"{schema}_{key}")


def build_tables(schema: str, engine: str) -> Tables:
    """The tables for ``schema`` on ``engine`` ("postgresql" or "sqlite")."""
    validate_identifier(schema, "schema")
    return Tables(**{f.name: _table(schema, engine, f.name) for f in fields(Tables)})


def migration_names(schema: str, engine: str) -> dict[str, str]:
    """The slots of the migration files: every table (retired ones too) as written in
    SQL, ``schema`` (PostgreSQL: the quoted schema) and ``prefix`` (SQLite: what index
    names start with; empty on PostgreSQL, whose index names live in the schema)."""
    tables = build_tables(schema, engine)
    names = tables.names()
    for key in RETIRED_TABLES:
        names[key] = tables.qualified(_table(schema, engine, key))
    names["schema"] = f'"{schema}"'
    names["prefix"] = "" if engine == "postgresql" else f"{schema}_"
    return names


def migrations(schema: str, engine: str) -> Migrations:
    """``engine``'s migrations rendered for ``schema``: what its setup applies."""
    validate_identifier(schema, "schema")
    return Migrations(ENGINE_PACKAGES[engine], migration_names(schema, engine))


def require_current(stored: int | None, where: str) -> None:
    """With ``setup=False``: raise :class:`SchemaMissing` unless the tables at ``where``
    are there and at this package's :data:`SCHEMA_VERSION` (an older layout lacks what
    the statements use; ``kombu-alkstore setup`` runs the migrations it lacks)."""
    if stored is None:
        raise SchemaMissing(
            f"the alkstore tables are missing in {where}; run `kombu-alkstore setup` "
            "(or its DDL) first"
        )
    if stored < SCHEMA_VERSION:
        raise SchemaMissing(
            f"the alkstore tables in {where} are at schema version {stored}, this "
            f"kombu-alkstore needs {SCHEMA_VERSION}; run `kombu-alkstore setup` (or apply "
            "`kombu-alkstore setup --print`: it only adds what is new) first"
        )


# ------------------------------------------------------------------- the setup script
def ddl_statements(
    schema: str, engine: str, existing: dict[str, set[str]] | None = None
) -> list[str]:
    """The idempotent setup script as statements: it creates what is missing and stamps
    :data:`SCHEMA_VERSION`, whatever version (or none) the tables are at.

    Printed by ``kombu-alkstore setup --print`` so a deployment whose runtime role may
    not create tables can apply it and connect with ``setup=False``.

    PostgreSQL: every migration in order (each is idempotent: ``IF NOT EXISTS``
    throughout, ``ADD COLUMN IF NOT EXISTS``), then the version. SQLite, whose
    ``ADD COLUMN`` cannot be made idempotent: the migrations' final layout (each table
    and index as ``CREATE … IF NOT EXISTS``, read back from an in-memory database the
    migrations were run on), their other statements as written (``DROP … IF EXISTS``,
    ``INSERT … ON CONFLICT DO NOTHING``: they must be idempotent and valid on the final
    layout; a future SQLite table rebuild, ``CREATE``/copy/``DROP``/``RENAME``, would need
    this revisited), and the version, stamped only where every added column exists, so
    a file the script could not upgrade keeps its version and ``setup=False`` still
    refuses it until ``kombu-alkstore setup`` ran (as before migrations). With
    ``existing`` (stored table name -> its columns, read by the caller under its write
    lock), the columns those tables lack are added too and the version is stamped.

    (An engine's setup should rather call ``migrations(...).apply`` under its lock: see
    :mod:`.migrate`. This script is what it replaces, kept for the printed form.)
    """
    found = migrations(schema, engine)
    if engine == "postgresql":
        out = [stmt for m in found.migrations for stmt in m.statements]
        out.append(found.record(found.latest))
        return out
    return _sqlite_script(found, schema, existing)


_CREATE = re.compile(r"^CREATE (TABLE|INDEX|UNIQUE INDEX) ", re.IGNORECASE)
_LAYOUT = re.compile(r"^\s*(CREATE|ALTER)\b", re.IGNORECASE)


def _sqlite_layout(found: Migrations) -> tuple[list[str], list[str]]:
    """``(tables, indexes)``: the final layout as ``CREATE … IF NOT EXISTS`` statements."""
    db = sqlite3.connect(":memory:")
    try:
        for m in found.migrations:
            for stmt in m.statements:
                db.execute(stmt)
        layout = db.execute(found.runner_statement("sqlite_layout")).fetchall()
    finally:
        db.close()
    tables = [
        _CREATE.sub(r"CREATE \1 IF NOT EXISTS ", sql, count=1) for t, sql in layout if t == "table"
    ]
    indexes = [
        _CREATE.sub(r"CREATE \1 IF NOT EXISTS ", sql, count=1) for t, sql in layout if t == "index"
    ]
    return tables, indexes


def _sqlite_script(
    found: Migrations, schema: str, existing: dict[str, set[str]] | None
) -> list[str]:
    tables, indexes = _sqlite_layout(found)
    added = [
        (m.statements[i], _table(schema, "sqlite", table).name, column)
        for m in found.migrations
        for i, table, column in m.added_columns
    ]
    # DROP … IF EXISTS, INSERT … ON CONFLICT DO NOTHING: as written, in order.
    rest = [stmt for m in found.migrations for stmt in m.statements if not _LAYOUT.match(stmt)]
    if existing is None:
        complete = " AND ".join(found.column_exists(t, c) for _, t, c in added) or "1"
        return [*tables, *indexes, *rest, found.record(found.latest, complete)]
    # A table not there before was just created with every column: it is left out.
    alters = [stmt for stmt, t, c in added if t in existing and c not in existing[t]]
    return [*tables, *alters, *indexes, *rest, found.record(found.latest)]


def ddl_script(schema: str, engine: str) -> str:
    """The setup script as one SQL text, each statement terminated by a semicolon."""
    return "".join(stmt + ";\n\n" for stmt in ddl_statements(schema, engine))
