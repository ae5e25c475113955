"""Versioned migrations (store/migrate.py, store/<engine>/migrations/NNNN_*.sql).

Every earlier layout is the genuine one: ``fixtures/ddl_v{N}_{engine}.sql`` is the setup
script the package printed at the last commit of that schema version (v1 also at its
first commit, 6197933, whose jobs table had no autovacuum settings on PostgreSQL). Each
is applied to a fresh schema (PostgreSQL) or file (SQLite) with rows in it, then the
migrations run under the engine's setup lock as the stores' setup runs them; the result
must be at the latest version, keep the rows, and have exactly a fresh install's layout
(columns, types, nullability, defaults, indexes, constraints, storage options).
"""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from kombu_alkstore.store.migrate import ENGINE_PACKAGES, LATEST, Migrations
from kombu_alkstore.store.schema import (
    SCHEMA_VERSION,
    build_tables,
    ddl_script,
    ddl_statements,
    migrations,
)
from kombu_alkstore.store.sqlfile import SQLFileError
from tests.conftest import PG_URL

FIXTURES = Path(__file__).parent / "fixtures"
#: (fixture, the schema version it stores)
OLD = {
    "postgresql": [
        ("v1_6197933", 1),
        ("v1", 1),
        ("v2", 2),
        ("v3", 3),
        ("v4", 4),
        ("v5", 5),
        ("v6", 6),
        ("v7", 7),
        ("v8", 8),
        ("v9", 9),
        ("v10", 10),
        ("v11", 11),
        ("v12", 12),
        ("v13", 13),
        ("v14", 14),
        ("v15", 15),
        ("v16", 16),
    ],
    "sqlite": [
        ("v1", 1),
        ("v2", 2),
        ("v3", 3),
        ("v4", 4),
        ("v5", 5),
        ("v6", 6),
        ("v7", 7),
        ("v8", 8),
        ("v9", 9),
        ("v10", 10),
        ("v11", 11),
        ("v12", 12),
        ("v13", 13),
        ("v14", 14),
        ("v15", 15),
        ("v16", 16),
    ],
}
#: The fixture of the current version: what a fresh install must equal.
CURRENT = "v17"
CASES = [(engine, name, version) for engine, olds in OLD.items() for name, version in olds]
IDS = [f"{engine}-{name}" for engine, name, _ in CASES]


def old_script(name: str, engine: str, schema: str) -> str:
    return (FIXTURES / f"ddl_{name}_{engine}.sql").read_text().replace("alkfixture", schema)


# ----------------------------------------------------------------------------- PostgreSQL
def pg_run(schema: str, sql: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql)


def pg_version(conn: psycopg.Connection, schema: str) -> int | None:
    meta = build_tables(schema, "postgresql")
    if conn.execute("SELECT to_regclass(%s)", (meta.qualified(meta.meta),)).fetchone()[0] is None:
        return None
    row = conn.execute(
        f"SELECT value FROM {meta.qualified(meta.meta)} WHERE key = 'schema_version'"
    ).fetchone()
    return int(row[0]) if row else None


def pg_migrate(schema: str) -> list[int]:
    """What PostgresStore's setup runs: the migrations after the stored version, under
    the schema's advisory lock, in one transaction."""
    found = migrations(schema, "postgresql")
    with psycopg.connect(PG_URL, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"alkstore_{schema}",))
        return found.apply(conn.execute, pg_version(conn, schema))


def pg_layout(schema: str) -> dict:
    """Everything about the schema's tables the catalogs say, the schema name masked."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:

        def rows(sql: str) -> list:
            got = conn.execute(sql, {"s": schema}).fetchall()
            return sorted(tuple(_mask(v, schema) for v in r) for r in got)

        return {
            "columns": rows(
                "SELECT table_name, ordinal_position, column_name, data_type, udt_name, "
                "is_nullable, column_default, character_maximum_length, numeric_precision "
                "FROM information_schema.columns WHERE table_schema = %(s)s"
            ),
            "relations": rows(
                "SELECT relname, relkind, reloptions::text, relpersistence FROM pg_class "
                "WHERE relnamespace = %(s)s::regnamespace"
            ),
            "indexes": rows(
                "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s"
            ),
            "constraints": rows(
                "SELECT conrelid::regclass::text, conname, contype::text, "
                "pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = %(s)s::regnamespace"
            ),
            "sequences": rows(
                "SELECT sequencename, data_type::text, start_value, increment_by, max_value "
                "FROM pg_sequences WHERE schemaname = %(s)s"
            ),
        }


def _mask(value, schema: str):
    return value.replace(schema, "<schema>") if isinstance(value, str) else value


# --------------------------------------------------------------------------------- SQLite
def sqlite_version(conn: sqlite3.Connection, schema: str) -> int | None:
    meta = build_tables(schema, "sqlite").meta.name
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (meta,)).fetchone():
        return None
    row = conn.execute(f"SELECT value FROM \"{meta}\" WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def sqlite_connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)  # transactions as the store runs them


def sqlite_migrate(path: Path, schema: str) -> list[int]:
    """What SQLiteStore's setup runs: the migrations after the stored version, read and
    applied under the write lock (BEGIN IMMEDIATE)."""
    found = migrations(schema, "sqlite")
    conn = sqlite_connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            applied = found.apply(conn.execute, sqlite_version(conn, schema))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return applied
    finally:
        conn.close()


def sqlite_layout(path: Path, schema: str) -> dict:
    conn = sqlite_connect(path)
    try:
        out: dict = {}
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ):
            cols = [tuple(r[1:]) for r in conn.execute(f'PRAGMA table_xinfo("{name}")')]
            indexes = {}
            for _, iname, unique, origin, partial in conn.execute(f'PRAGMA index_list("{name}")'):
                keys = [tuple(r) for r in conn.execute(f'PRAGMA index_xinfo("{iname}")')]
                isql = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (iname,)
                ).fetchone()[0]
                # Quoting and line breaks are how a statement was written, not the layout.
                isql = isql and re.sub(r"\s+", " ", isql.replace('"', "")).strip()
                indexes[iname] = (unique, origin, partial, keys, isql)
            out[_mask(name, schema)] = {
                "columns": cols,
                "autoincrement": "AUTOINCREMENT" in (sql or "").upper(),
                "without_rowid": "WITHOUT ROWID" in (sql or "").upper(),
                "indexes": {_mask(k, schema): v for k, v in indexes.items()},
            }
        return {k: _mask_nested(v, schema) for k, v in out.items()}
    finally:
        conn.close()


def _mask_nested(value, schema: str):
    if isinstance(value, dict):
        return {k: _mask_nested(v, schema) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_mask_nested(v, schema) for v in value)
    return _mask(value, schema)


# ------------------------------------------------------------------------------ helpers
class Place:
    """One engine's isolated place for a layout: a schema or a file, dropped after."""

    def __init__(self, engine: str, tmp_path: Path) -> None:
        self.engine = engine
        self.tmp_path = tmp_path
        self.made: list[str] = []

    def new(self) -> tuple[str, Path | None]:
        schema = "mig_" + uuid.uuid4().hex[:10]
        self.made.append(schema)
        path = self.tmp_path / f"{schema}.db" if self.engine == "sqlite" else None
        return schema, path

    def run(self, schema: str, path: Path | None, script: str) -> None:
        if path is None:
            pg_run(schema, script)
        else:
            conn = sqlite_connect(path)
            try:
                conn.executescript(script)
            finally:
                conn.close()

    def migrate(self, schema: str, path: Path | None) -> list[int]:
        return pg_migrate(schema) if path is None else sqlite_migrate(path, schema)

    def layout(self, schema: str, path: Path | None) -> dict:
        return pg_layout(schema) if path is None else sqlite_layout(path, schema)

    def query(self, schema: str, path: Path | None, sql: str) -> list[tuple]:
        if path is None:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                return conn.execute(sql).fetchall()
        conn = sqlite_connect(path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def version(self, schema: str, path: Path | None) -> int | None:
        if path is None:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                return pg_version(conn, schema)
        conn = sqlite_connect(path)
        try:
            return sqlite_version(conn, schema)
        finally:
            conn.close()

    def fresh(self) -> dict:
        """A fresh install's layout (the migrations from nothing)."""
        schema, path = self.new()
        assert self.migrate(schema, path) == list(range(1, SCHEMA_VERSION + 1))
        return self.layout(schema, path)

    def drop(self) -> None:
        if self.engine == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                for schema in self.made:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def insert_rows(place: Place, schema: str, path: Path | None) -> None:
    """A job and a schedule, in the columns every version has."""
    t = build_tables(schema, place.engine)
    body = "'\\x6b657074'::bytea" if path is None else "X'6b657074'"  # b"kept"
    place.run(
        schema,
        path,
        f"INSERT INTO {t.qualified(t.jobs)} (queue, body, run_at, max_attempts, "
        f"visibility_timeout, backoff_base, created_at) VALUES ('q', {body}, 5, 3, 30, 1, 4);"
        f"INSERT INTO {t.qualified(t.schedules)} (name, spec, interval, task, args, kwargs, "
        "options, next_at, origin, updated_at) VALUES ('s', '@every 1m', 60, 't', '[]', "
        "'{}', '{}', 120, 'api', 0);",
    )


def assert_rows_kept(place: Place, schema: str, path: Path | None) -> None:
    t = build_tables(schema, place.engine)
    jobs = place.query(
        schema, path, f"SELECT queue, body, state, attempts FROM {t.qualified(t.jobs)}"
    )
    assert [(q, bytes(b), s, a) for q, b, s, a in jobs] == [("q", b"kept", "pending", 0)]
    sched = place.query(
        schema,
        path,
        f"SELECT name, next_at, kind, tz, enabled, run_count FROM {t.qualified(t.schedules)}",
    )
    assert [tuple(r[:4]) + (bool(r[4]), r[5]) for r in sched] == [
        ("s", 120, "every", "UTC", True, 0)
    ]


# -------------------------------------------------------------------------------- tests
def test_latest_is_the_schema_version_on_every_engine():
    assert LATEST == {"postgresql": 17, "sqlite": 17}
    assert SCHEMA_VERSION == 17
    for engine in ENGINE_PACKAGES:
        found = migrations("alk", engine)
        assert [m.version for m in found.migrations] == list(range(1, 18))
        assert found.pending(None) == list(found.migrations)
        assert [m.version for m in found.pending(1)] == list(range(2, 18))
        assert [m.version for m in found.pending(7)] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        assert [m.version for m in found.pending(9)] == [10, 11, 12, 13, 14, 15, 16, 17]
        assert [m.version for m in found.pending(11)] == [12, 13, 14, 15, 16, 17]
        assert found.pending(17) == [] and found.pending(18) == []


@pytest.mark.parametrize(("engine", "name", "version"), CASES, ids=IDS)
def test_upgrade_from_every_earlier_version(engine, name, version, tmp_path):
    place = Place(engine, tmp_path)
    try:
        fresh = place.fresh()
        schema, path = place.new()
        place.run(schema, path, old_script(name, engine, schema))
        insert_rows(place, schema, path)
        assert place.version(schema, path) == version
        assert place.migrate(schema, path) == list(range(version + 1, SCHEMA_VERSION + 1))
        assert place.version(schema, path) == SCHEMA_VERSION
        assert_rows_kept(place, schema, path)
        assert place.layout(schema, path) == fresh
        # Once more: nothing to do, nothing changed.
        assert place.migrate(schema, path) == []
        assert place.layout(schema, path) == fresh
        assert_rows_kept(place, schema, path)
    finally:
        place.drop()


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_fresh_install_is_the_current_layout_and_idempotent(engine, tmp_path):
    """The migrations from nothing give exactly what the version-6 code created."""
    place = Place(engine, tmp_path)
    try:
        fresh = place.fresh()
        schema, path = place.new()
        place.run(schema, path, old_script(CURRENT, engine, schema))
        assert place.layout(schema, path) == fresh
        schema, path = place.new()
        assert place.migrate(schema, path) == list(range(1, 18))
        assert place.migrate(schema, path) == []
        assert place.version(schema, path) == SCHEMA_VERSION
        assert place.query(
            schema,
            path,
            f"SELECT value FROM {migrations(schema, engine).names['meta']} "
            "WHERE key = 'routing_version'",
        ) == [("0",)]
        assert place.layout(schema, path) == fresh
    finally:
        place.drop()


@pytest.mark.parametrize(
    ("name", "version"), OLD["postgresql"], ids=[n for n, _ in OLD["postgresql"]]
)
def test_postgres_printed_script_upgrades_every_earlier_version(name, version, tmp_path):
    """`setup --print` (what a least-privilege install applies) is idempotent and brings
    every earlier layout to the current one."""
    place = Place("postgresql", tmp_path)
    try:
        fresh = place.fresh()
        schema, path = place.new()
        place.run(schema, path, old_script(name, "postgresql", schema))
        insert_rows(place, schema, path)
        script = ddl_script(schema, "postgresql")
        place.run(schema, path, script)
        place.run(schema, path, script)
        assert place.version(schema, path) == SCHEMA_VERSION
        assert place.layout(schema, path) == fresh
        assert_rows_kept(place, schema, path)
        assert place.migrate(schema, path) == []
        # Printed for a fresh schema: the same layout.
        schema, path = place.new()
        place.run(schema, path, ddl_script(schema, "postgresql"))
        assert place.version(schema, path) == SCHEMA_VERSION
        assert place.layout(schema, path) == fresh
    finally:
        place.drop()


def test_sqlite_printed_script_on_a_fresh_file_and_on_older_files(tmp_path):
    """SQLite's printed script is the final layout with IF NOT EXISTS: a fresh file gets
    exactly the migrations' layout at the latest version (twice: idempotent); an older
    file gets the new tables but not the columns it cannot add idempotently, so it keeps
    its version (``setup=False`` refuses it) until the migrations run. Since version 6
    such a file also stops the script at its last index, jobs_unique, whose column it
    lacks ("no such column"), just before the version it would not have stamped; a
    version-6 file at jobs_limit_claimed (version 7's limit_key). A version-7 to 9
    file runs the script to its end but keeps its version: versions 10 and 11 add
    columns to queues (rate_limits, rate_wait; fair_shares, fair_pass, fair_vtime),
    which only the migrations add. A version-10 to 13 file stops at the numbering of
    claim_log's rows (version 14's columns n and kn), its version kept. A version-14
    to 16 file is complete after it (versions 15 to 17 change nothing on SQLite)."""
    place = Place("sqlite", tmp_path)
    fresh = place.fresh()
    schema, path = place.new()
    script = ddl_script(schema, "sqlite")
    place.run(schema, path, script)
    place.run(schema, path, script)
    assert place.version(schema, path) == SCHEMA_VERSION
    assert place.layout(schema, path) == fresh
    assert place.migrate(schema, path) == []
    for name, version in OLD["sqlite"]:
        schema, path = place.new()
        place.run(schema, path, old_script(name, "sqlite", schema))
        insert_rows(place, schema, path)
        if version >= 14:
            # A version-14 file has every column: versions 15 to 17 change nothing on SQLite,
            # so the script completes it and stamps it.
            place.run(schema, path, ddl_script(schema, "sqlite"))
            after = SCHEMA_VERSION
        elif version >= 10:
            # Version 14 adds claim_log.n and kn to the table version 10 made, which the
            # script cannot add to it: it stops at their numbering of the rows logged
            # before, and the version stays; the migrations add and number them.
            with pytest.raises(sqlite3.OperationalError, match="no such column: n"):
                place.run(schema, path, ddl_script(schema, "sqlite"))
            after = version
        elif version >= 7:
            # Versions 10 and 11 add columns to queues, which the script cannot add to an
            # existing table: it runs to its end (its other statements are idempotent;
            # claim_log is new to such a file, made with every column) and the version
            # stamp, guarded by the columns, stays; the migrations add them.
            place.run(schema, path, ddl_script(schema, "sqlite"))
            after = version
        else:
            lacks = "limit_key" if version == 6 else "unique_key"  # its first index's column
            with pytest.raises(sqlite3.OperationalError, match=f"no such column: {lacks}"):
                place.run(schema, path, ddl_script(schema, "sqlite"))
            # Versions 4 and 5 only add tables, versions 6 and 7 add columns: no file
            # before 7 is complete after the script.
            after = version
        assert place.version(schema, path) == after
        assert place.migrate(schema, path) == list(range(after + 1, SCHEMA_VERSION + 1))
        assert place.layout(schema, path) == fresh
        assert_rows_kept(place, schema, path)


@pytest.mark.parametrize(("name", "version"), OLD["sqlite"], ids=[n for n, _ in OLD["sqlite"]])
def test_sqlite_setup_statements_with_existing_columns(name, version, tmp_path):
    """``ddl_statements(schema, "sqlite", existing)``, what SQLiteStore.setup runs until it
    calls the migrations, upgrades every earlier file to the same layout."""
    place = Place("sqlite", tmp_path)
    fresh = place.fresh()
    schema, path = place.new()
    place.run(schema, path, old_script(name, "sqlite", schema))
    insert_rows(place, schema, path)
    conn = sqlite_connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        existing = {}
        for table in build_tables(schema, "sqlite").all():
            cols = {r[1] for r in conn.execute(f'PRAGMA table_info("{table.name}")')}
            if cols:
                existing[table.name] = cols
        for stmt in ddl_statements(schema, "sqlite", existing):
            conn.execute(stmt)
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert place.version(schema, path) == SCHEMA_VERSION
    assert place.layout(schema, path) == fresh
    assert_rows_kept(place, schema, path)


def test_sqlite_add_column_already_there_is_skipped(tmp_path):
    """A file stamped 2 whose tables already have some version-3 columns (a layout
    between versions): the migration adds only the missing ones."""
    place = Place("sqlite", tmp_path)
    fresh = place.fresh()
    schema, path = place.new()
    place.run(schema, path, old_script("v3", "sqlite", schema))
    t = build_tables(schema, "sqlite")
    place.run(
        schema,
        path,
        f"ALTER TABLE {t.qualified(t.schedules)} DROP COLUMN run_requested;"
        f"DROP TABLE {t.qualified(t.offers)};"
        f"UPDATE {t.qualified(t.meta)} SET value = '2' WHERE key = 'schema_version';",
    )
    assert place.migrate(schema, path) == list(range(3, SCHEMA_VERSION + 1))
    assert place.layout(schema, path) == fresh


def _migrate_at(schema: str, start: float) -> list[int]:
    time.sleep(max(0.0, start - time.time()))
    return pg_migrate(schema)


@pytest.mark.parametrize("name", ["none", "v1", "v2"])
def test_postgres_concurrent_migrations_end_consistent(name, tmp_path):
    """Processes migrating one schema at once: each waits for the lock, the first
    applies the migrations, the others find nothing to do; one consistent layout."""
    place = Place("postgresql", tmp_path)
    try:
        fresh = place.fresh()
        schema, path = place.new()
        if name != "none":
            place.run(schema, path, old_script(name, "postgresql", schema))
            insert_rows(place, schema, path)
        start = time.time() + 1.0
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            results = pool.starmap(_migrate_at, [(schema, start)] * 4)
        applied = sorted(v for r in results for v in r)
        first = 1 if name == "none" else int(name[1]) + 1
        assert applied == list(range(first, SCHEMA_VERSION + 1))
        assert sum(1 for r in results if r) == 1
        assert place.version(schema, path) == SCHEMA_VERSION
        assert place.layout(schema, path) == fresh
        if name != "none":
            assert_rows_kept(place, schema, path)
    finally:
        place.drop()


def test_a_failing_migration_leaves_the_stored_version(tmp_path):
    """Each migration is recorded in the caller's transaction: a failure rolls back the
    statements and the version together."""
    place = Place("postgresql", tmp_path)
    try:
        schema, path = place.new()
        place.run(schema, path, old_script("v2", "postgresql", schema))
        t = build_tables(schema, "postgresql")
        # Something depends on the waiters table migration 3 drops: it fails there, after
        # its CREATE statements ran.
        place.run(schema, path, f'CREATE VIEW "{schema}".w AS SELECT * FROM "{schema}".waiters')
        with pytest.raises(psycopg.errors.DatabaseError):
            pg_migrate(schema)
        assert place.version(schema, path) == 2
        assert place.query(schema, path, f"SELECT to_regclass('{t.qualified(t.offers)}')") == [
            (None,)
        ]
    finally:
        place.drop()


def test_migration_files_are_checked(tmp_path, monkeypatch):
    import kombu_alkstore.store.migrate as migrate

    pkg = tmp_path / "fakepkg"
    (pkg / "migrations").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "migrations" / "0001_a.sql").write_text("-- name: a\nSELECT {jobs};\n")
    (pkg / "migrations" / "0003_c.sql").write_text("-- name: c\nSELECT 1;\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SQLFileError, match=r"numbered 1, 2, 3"):
        migrate.Migrations("fakepkg.migrations", {"jobs": "j", "meta": "m"})
    (pkg / "migrations" / "0003_c.sql").rename(pkg / "migrations" / "0002_c.sql")
    found = migrate.Migrations("fakepkg.migrations", {"jobs": "j", "meta": "m"})
    assert [m.statements for m in found.migrations] == [("SELECT j",), ("SELECT 1",)]
    with pytest.raises(SQLFileError, match=r"\{jobs\} is neither"):
        migrate.Migrations("fakepkg.migrations", {"meta": "m"})
    (pkg / "migrations" / "notes.sql").write_text("-- name: x\nSELECT 1;\n")
    with pytest.raises(SQLFileError, match="NNNN_"):
        migrate.Migrations("fakepkg.migrations", {"jobs": "j", "meta": "m"})


def test_the_layout_is_only_in_the_migrations():
    """One source of truth: no column is described in Python, and the printed scripts are
    made of the migration files' statements (PostgreSQL) or their final layout (SQLite)."""
    source = (Path(__file__).parents[2] / "kombu_alkstore/store/schema.py").read_text()
    assert "sqlalchemy" not in source and "Column(" not in source
    pg = ddl_statements("alk", "postgresql")
    found = migrations("alk", "postgresql")
    assert pg[:-1] == [s for m in found.migrations for s in m.statements]
    for stmt in pg:
        if stmt.startswith("CREATE") or "ADD COLUMN" in stmt:
            assert "IF NOT EXISTS" in stmt, stmt
        if stmt.startswith("DROP"):
            assert "IF EXISTS" in stmt, stmt
    lite = ddl_statements("alk", "sqlite")
    assert all("IF NOT EXISTS" in s for s in lite if s.startswith("CREATE"))
    assert all("IF EXISTS" in s for s in lite if s.startswith("DROP"))
    assert not any(s.upper().startswith("ALTER") for s in lite)
    assert isinstance(found, Migrations)
