"""The store's table names for one schema on one engine, and the printed setup script.

The layout itself is written once, as each engine's numbered migrations
(``store/<engine>/migrations/NNNN_*.sql``, run by :mod:`.migrate`); nothing here
describes a column. PostgreSQL keeps the tables in an engine-owned schema
(``alkstore.jobs``); SQLite has no schemas, so the same name becomes a table prefix
(``alkstore_jobs``), index names included.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import SchemaMissing
from .engines import engine_named
from .migrate import LATEST, Migrations
from .options import validate_identifier

#: The newest schema version, stored in the ``meta`` table: the number of the newest
#: migration file (the same on every engine). 1: the queue tables; 2: the waiters table
#: (hand-off to idle consumers); 3: offers (one per channel, its slots shared by its
#: queues) instead of waiters; paused_queues, rates and the dead_died index (the
#: dashboard); the beat's schedule columns; jobs.revoked_at; 4: the result backend's
#: results, chords and chord_parts (kombu_alkstore.results); 5: revokes (a table of
#: their own, so that recording one locks no job row); 6: jobs.unique_key,
#: jobs.unique_claimed and the partial unique index jobs_unique (unique tasks); 7:
#: concurrency limits (queues.max_claimed, key_limits, jobs.limit_key); 8: acts, the
#: operators' acts on record (append-only, store/acts.py); 9: a lapsed claim in a
#: heartbeat's hands keeps its limited slot (PostgreSQL); 10: rate limits
#: (queues.rate_limits, queues.rate_wait, claim_log); 11: fair share (queues.fair_shares,
#: fair_pass, fair_vtime and the partial index jobs_fair); 12: the claim index jobs_claim
#: partial (PostgreSQL), so lookups by id use only the primary key; 13: the claim logs
#: for its rates the jobs it took, not the function's picks (PostgreSQL: limited_picks);
#: 14: claim_log's ordinals (n, kn), so a rated claim reads a window's use in two probes;
#: 15: unique_keys, the keys of unique jobs in a table of their own kept by triggers on
#: jobs (PostgreSQL; on SQLite the table is not made: jobs_unique holds the keys there);
#: 16: a claim's and an ack's writes by id in functions planned without sequential
#: scans (PostgreSQL: delete_rows, claim_rows); 17: jobs in four generations by the
#: server's clock, one emptied in turn by rotate_generation (PostgreSQL; jobs_unique
#: goes, store/generations.py).
SCHEMA_VERSION = max(LATEST.values())
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
    results: Table
    chords: Table
    chord_parts: Table
    revokes: Table
    acts: Table
    claim_log: Table
    unique_keys: Table

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
    if engine_named(engine).schemas:
        return Table(key, key, schema)
    return Table(key, f"{schema}_{key}")


def build_tables(schema: str, engine: str) -> Tables:
    """The tables for ``schema`` on the engine named ``engine`` ("postgresql" or "sqlite")."""
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
    names["prefix"] = "" if engine_named(engine).schemas else f"{schema}_"
    return names


def migrations(schema: str, engine: str) -> Migrations:
    """``engine``'s migrations rendered for ``schema``: what its setup applies."""
    validate_identifier(schema, "schema")
    return Migrations(engine_named(engine).migrations, migration_names(schema, engine))


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

    Each engine writes its own (see :attr:`.engines.Engine.script`). PostgreSQL: every
    migration in order (each is idempotent), then the version. SQLite, whose ``ADD
    COLUMN`` cannot be made idempotent: the migrations' final layout, their other
    statements, and the version where every added column exists
    (``store/sqlite/script.py``); with ``existing`` (stored table name -> its columns,
    read by the caller under its write lock), the columns those tables lack are added
    too and the version is stamped.

    (An engine's setup should rather call ``migrations(...).apply`` under its lock: see
    :mod:`.migrate`. This script is what it replaces, kept for the printed form.)
    """
    found = migrations(schema, engine)

    def stored_name(key: str) -> str:
        return _table(schema, engine, key).name

    return engine_named(engine).script(found, existing, stored_name)


def ddl_script(schema: str, engine: str) -> str:
    """The setup script as one SQL text, each statement terminated by a semicolon."""
    return "".join(stmt + ";\n\n" for stmt in ddl_statements(schema, engine))
