"""One table definition for both engines, and the DDL generated from it.

PostgreSQL keeps the tables in an engine-owned schema (``alkstore.jobs``); SQLite has no
schemas, so the same name becomes a table prefix (``alkstore_jobs``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable

from ..errors import SchemaMissing
from .options import validate_identifier

#: Bumped whenever the table layout changes; stored in the ``meta`` table.
#: 2: the waiters table (hand-off to idle consumers); 3: offers (one per channel, its slots
#: shared by its queues) instead of waiters; paused_queues, rates (the dashboard: paused
#: queues, per-minute publish/ack counts) and the dead_died index; the beat's schedule
#: columns (kinds, time zones, lifecycle: see ADDED_COLUMNS).
SCHEMA_VERSION = 3

# SQLite only makes "INTEGER PRIMARY KEY" an alias of the rowid.
_ID = BigInteger().with_variant(Integer(), "sqlite")


@dataclass(frozen=True)
class Tables:
    """The store's tables for one schema name on one engine."""

    metadata: MetaData
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

    def names(self) -> dict[str, str]:
        """Every table's short name (``jobs``) and its name as written in SQL."""
        return {
            f.name: self.qualified(getattr(self, f.name))
            for f in fields(self)
            if f.name != "metadata"
        }

    def qualified(self, table: Table) -> str:
        """The table name as written in SQL (quoted, schema-qualified on PostgreSQL)."""
        if table.schema:
            return f'"{table.schema}"."{table.name}"'
        return f'"{table.name}"'


def build_tables(schema: str, engine: str) -> Tables:
    """Table objects for ``schema`` on ``engine`` ("postgresql" or "sqlite")."""
    validate_identifier(schema, "schema")
    if engine == "postgresql":
        md, prefix = MetaData(schema=schema), ""
    else:
        md, prefix = MetaData(), f"{schema}_"

    def name(n: str) -> str:
        return prefix + n

    jobs = Table(
        name("jobs"),
        md,
        Column("id", _ID, primary_key=True, autoincrement=True),
        Column("queue", Text, nullable=False),
        Column("msg_id", Text),
        Column("body", LargeBinary, nullable=False),
        Column("priority", SmallInteger, nullable=False, server_default=text("0")),
        Column("state", Text, nullable=False, server_default=text("'pending'")),
        # While pending: when the job becomes due. While processing: equal to the
        # deadline, so a lapsed claim is simply due again in the same index.
        Column("run_at", Double, nullable=False),
        Column("expires_at", Double),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("max_attempts", Integer, nullable=False),
        Column("visibility_timeout", Double, nullable=False),
        Column("backoff_base", Double, nullable=False),
        Column("deadline", Double),
        Column("token", BigInteger),
        Column("created_at", Double, nullable=False),
        # When a Celery revoke of this task reached the broker (see Store.revoke): a
        # claim delivers it marked, so the worker discards it, whatever its restarts.
        Column("revoked_at", Double),
        sqlite_autoincrement=True,
        # A queue table churns: vacuum it early so claims do not walk dead index entries.
        postgresql_with={
            "autovacuum_vacuum_scale_factor": "0.01",
            "autovacuum_vacuum_threshold": "1000",
            "autovacuum_analyze_scale_factor": "0.02",
        },
    )
    Index(name("jobs_claim"), jobs.c.queue, jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
    Index(
        name("jobs_expiring"),
        jobs.c.expires_at,
        postgresql_where=jobs.c.expires_at.isnot(None),
        sqlite_where=jobs.c.expires_at.isnot(None),
    )
    Index(
        name("jobs_processing"),
        jobs.c.queue,
        postgresql_where=jobs.c.state == "processing",
        sqlite_where=jobs.c.state == "processing",
    )

    dead = Table(
        name("dead"),
        md,
        Column("id", _ID, primary_key=True, autoincrement=False),
        Column("queue", Text, nullable=False),
        Column("msg_id", Text),
        Column("body", LargeBinary, nullable=False),
        Column("priority", SmallInteger, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("max_attempts", Integer, nullable=False),
        Column("visibility_timeout", Double, nullable=False),
        Column("backoff_base", Double, nullable=False),
        Column("expires_at", Double),
        Column("created_at", Double, nullable=False),
        Column("died_at", Double, nullable=False),
        Column("last_error", Text, nullable=False),
    )
    Index(
        name("dead_msg_id"),
        dead.c.msg_id,
        postgresql_where=dead.c.msg_id.isnot(None),
        sqlite_where=dead.c.msg_id.isnot(None),
    )
    Index(name("dead_queue"), dead.c.queue, dead.c.died_at)
    Index(name("dead_died"), dead.c.died_at)  # the dashboard's newest-first dead letters

    exchanges = Table(
        name("exchanges"),
        md,
        Column("name", Text, primary_key=True),
        Column("type", Text, nullable=False),
    )
    bindings = Table(
        name("bindings"),
        md,
        Column("exchange", Text, nullable=False),
        Column("routing_key", Text, nullable=False),
        Column("queue", Text, nullable=False),
        PrimaryKeyConstraint("exchange", "routing_key", "queue"),
    )
    Index(name("bindings_queue"), bindings.c.queue)

    queues = Table(
        name("queues"),
        md,
        Column("name", Text, primary_key=True),
        Column("message_ttl", Double),  # x-message-ttl, seconds
        Column("expires", Double),  # x-expires: drop the queue after this long unused
        Column("last_used", Double, nullable=False),
        Column("visibility_timeout", Double),
        Column("max_attempts", Integer),
        Column("backoff_base", Double),
        Column("dead_letter_retention", Double),
    )

    schedules = Table(
        name("schedules"),
        md,
        Column("name", Text, primary_key=True),
        Column("spec", Text, nullable=False),
        Column("interval", Double, nullable=False),
        Column("task", Text, nullable=False),
        Column("args", Text, nullable=False),
        Column("kwargs", Text, nullable=False),
        Column("options", Text, nullable=False),
        Column("next_at", Double, nullable=False),
        Column("origin", Text, nullable=False),  # 'config' (beat_schedule) or 'api'
        Column("updated_at", Double, nullable=False),
        # Version 3 (added to older tables by ADDED_COLUMNS):
        Column("kind", Text, nullable=False, server_default=text("'every'")),  # or 'cron'
        Column("tz", Text, nullable=False, server_default=text("'UTC'")),  # IANA zone name
        Column("enabled", Boolean, nullable=False, server_default=text("true")),
        Column("last_run_at", Double),
        Column("run_count", BigInteger, nullable=False, server_default=text("0")),
        Column("last_error", Text),
        Column("run_requested", Double),  # run-now: requested at (cleared when fired)
    )

    leases = Table(
        name("leases"),
        md,
        Column("name", Text, primary_key=True),
        Column("owner", Text, nullable=False),
        Column("expires_at", Double, nullable=False),
    )

    meta = Table(
        name("meta"),
        md,
        Column("key", Text, primary_key=True),
        Column("value", Text, nullable=False),
    )
    # Idle consumers a publisher may hand a new job to directly (PostgreSQL): one row per
    # (LISTEN backend, kombu channel), its free slots shared by all the queues it consumes.
    # ``pid`` also names the advisory lock that backend holds while it lives, so a row
    # left by a dead worker is never used. (Version 2 kept one row per queue in
    # ``waiters``, each with all the slots; that table is no longer used.)
    offers = Table(
        name("offers"),
        md,
        Column("pid", Integer, nullable=False),
        Column("chan", Integer, nullable=False),
        Column("queues", postgresql.ARRAY(Text).with_variant(Text(), "sqlite"), nullable=False),
        Column("slots", Integer, nullable=False),
        PrimaryKeyConstraint("pid", "chan"),
    )
    # Paused queues: claims and hand-offs skip them, publishes still land (a table of its
    # own rather than a column of ``queues``, so old databases get it from the DDL).
    paused_queues = Table(
        name("paused_queues"),
        md,
        Column("queue", Text, primary_key=True),
        Column("paused_at", Double, nullable=False),
    )
    # Publishes and acks per queue and minute, counted in each process and flushed every
    # few seconds (``Store.flush_rates``): the dashboard's rate chart, kept across restarts.
    rates = Table(
        name("rates"),
        md,
        Column("queue", Text, nullable=False),
        Column("minute", Double, nullable=False),
        Column("published", BigInteger, nullable=False),
        Column("acked", BigInteger, nullable=False),
        PrimaryKeyConstraint("queue", "minute"),
    )
    Index(name("rates_minute"), rates.c.minute)
    return Tables(
        md,
        jobs,
        dead,
        exchanges,
        bindings,
        queues,
        schedules,
        leases,
        meta,
        offers,
        paused_queues,
        rates,
    )


#: Columns a schema version added to tables an older version created, per version, in
#: order. ``CREATE TABLE IF NOT EXISTS`` cannot add a column to an existing table, so the
#: upgrade adds these (PostgreSQL: ``ADD COLUMN IF NOT EXISTS``; SQLite: the missing
#: ones, found with ``PRAGMA table_info``). A version that adds columns appends its list.
ADDED_COLUMNS: dict[int, list[tuple[str, str]]] = {
    3: [
        ("schedules", "kind"),
        ("schedules", "tz"),
        ("schedules", "enabled"),
        ("schedules", "last_run_at"),
        ("schedules", "run_count"),
        ("schedules", "last_error"),
        ("schedules", "run_requested"),
        ("jobs", "revoked_at"),
    ],
}


def _added_columns(
    tables: Tables, engine: str, dialect, existing: dict[str, set[str]] | None
) -> list[str]:
    """``ALTER TABLE … ADD COLUMN`` for every column of :data:`ADDED_COLUMNS`.

    PostgreSQL: all of them, ``IF NOT EXISTS`` (idempotent). SQLite has no such clause:
    only the columns missing from ``existing`` (table name -> column names, read by the
    caller inside its write lock); none when ``existing`` is None (a printed script).
    """
    out = []
    for version in sorted(ADDED_COLUMNS):
        for attr, column in ADDED_COLUMNS[version]:
            table = getattr(tables, attr)
            spec = str(CreateColumn(table.c[column]).compile(dialect=dialect)).strip()
            if engine == "postgresql":
                out.append(f"ALTER TABLE {tables.qualified(table)} ADD COLUMN IF NOT EXISTS {spec}")
            elif existing is not None and column not in existing.get(table.name, {column}):
                out.append(f"ALTER TABLE {tables.qualified(table)} ADD COLUMN {spec}")
    return out


def _sqlite_version_guard(tables: Tables) -> str:
    """SQLite, printed script: a WHERE clause true only once every added column exists,
    so the script never stamps the current version on a file it could not upgrade."""
    checks = []
    for version in sorted(ADDED_COLUMNS):
        for attr, column in ADDED_COLUMNS[version]:
            table = getattr(tables, attr)
            checks.append(
                f"EXISTS (SELECT 1 FROM pragma_table_info('{table.name}') WHERE name = '{column}')"
            )
    return " AND ".join(checks) or "1"


def require_current(stored: int | None, where: str) -> None:
    """With ``setup=False``: raise :class:`SchemaMissing` unless the tables at ``where``
    are there and at this package's :data:`SCHEMA_VERSION` (an older layout lacks what
    the statements use; its upgrade only adds tables, see :func:`ddl_statements`)."""
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


def ddl_statements(
    schema: str, engine: str, existing: dict[str, set[str]] | None = None
) -> list[str]:
    """Idempotent DDL creating every table and index (``IF NOT EXISTS`` throughout), and
    adding the columns of :data:`ADDED_COLUMNS` to tables an older version created.

    Printed by ``kombu-alkstore setup --print`` so a deployment whose runtime role may
    not create tables can apply it as a migration and connect with ``setup=False``.
    On SQLite, ``existing`` (table name -> its columns) selects the columns to add; the
    printed script (``existing`` None) adds none and leaves an older file's version as
    it was, so ``setup=False`` still refuses it until ``kombu-alkstore setup`` ran.
    """
    tables = build_tables(schema, engine)
    dialect = postgresql.dialect() if engine == "postgresql" else sqlite.dialect()
    out: list[str] = []
    if engine == "postgresql":
        out.append(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    for table in tables.metadata.sorted_tables:
        out.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip())
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            out.append(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)).strip())
    out.extend(_added_columns(tables, engine, dialect, existing))
    meta = tables.qualified(tables.meta)
    out.append(
        f"INSERT INTO {meta} (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}'), "
        "('routing_version', '0') ON CONFLICT (key) DO NOTHING"
    )
    # An older layout was just brought up to date (the DDL above only adds what is new).
    guard = ""
    if engine == "sqlite" and existing is None:
        guard = f" AND {_sqlite_version_guard(tables)}"
    out.append(f"UPDATE {meta} SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version'{guard}")
    return out


def ddl_script(schema: str, engine: str) -> str:
    """The DDL as one SQL script, each statement terminated by a semicolon."""
    return "".join(stmt + ";\n\n" for stmt in ddl_statements(schema, engine))
