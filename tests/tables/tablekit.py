"""Helpers for the table-queue tests: the service's own table, made by its own DDL, and
rows inserted by plain SQL, outside kombu-alkstore (as a service's migration and code
would)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

PG_DDL = """
CREATE TABLE {t} (
  id bigserial PRIMARY KEY,
  prio int NOT NULL DEFAULT 0,
  grp text,
  retry_after timestamptz,
  attempts int NOT NULL DEFAULT 0,
  sent_at timestamptz,
  locked_until timestamptz,
  body jsonb,
  recipient text
)"""

SQLITE_DDL = """
CREATE TABLE {t} (
  id INTEGER PRIMARY KEY,
  prio INTEGER NOT NULL DEFAULT 0,
  grp TEXT,
  retry_after TEXT,
  attempts INTEGER NOT NULL DEFAULT 0,
  sent_at TEXT,
  locked_until TEXT,
  body TEXT,
  recipient TEXT
)"""

COLUMNS = {
    "id": "id",
    "priority": "prio",
    "retry_after": "retry_after",
    "attempt": "attempts",
    "processed_at": "sent_at",
    "locked_until": "locked_until",
    "payload": "body",
}


def table_name(target, name: str = "email_jobs") -> str:
    """The table as configuration names it (PostgreSQL: in the test's own schema)."""
    return f"{target.schema}.{name}" if target.engine == "postgresql" else name


def quoted(target, name: str = "email_jobs") -> str:
    return f'"{target.schema}"."{name}"' if target.engine == "postgresql" else f'"{name}"'


@contextmanager
def service_tx(target) -> Iterator[Any]:
    """A transaction of the service's own (its own driver connection), committed on
    leaving, rolled back on an error: yields ``execute(sql, params)``."""
    if target.engine == "postgresql":
        with psycopg.connect(target.url) as conn:  # commits on a clean exit
            yield lambda sql, params=(): conn.execute(sql.replace("?", "%s"), params)
        return
    conn = sqlite3.connect(target.url.removeprefix("sqlite:///"), timeout=30)
    try:
        with conn:
            yield lambda sql, params=(): conn.execute(sql, params)
    finally:
        conn.close()


def make_table(target, name: str = "email_jobs") -> None:
    ddl = PG_DDL if target.engine == "postgresql" else SQLITE_DDL
    with service_tx(target) as run:
        run(ddl.format(t=quoted(target, name)))


def insert(target, body: str, prio: int = 0, table: str = "email_jobs", **cols: Any) -> None:
    """One row, inserted by plain SQL and committed."""
    names = ["body", "prio", *cols]
    marks = ", ".join("?" for _ in names)
    with service_tx(target) as run:
        run(
            f"INSERT INTO {quoted(target, table)} ({', '.join(names)}) VALUES ({marks})",
            (body, prio, *cols.values()),
        )


def rows(target, table: str = "email_jobs") -> list[tuple]:
    """(id, attempts, processed?, leased?, grp) of every row, by id."""
    with service_tx(target) as run:
        return [
            tuple(r)
            for r in run(
                f"SELECT id, attempts, sent_at IS NOT NULL, locked_until IS NOT NULL, grp "
                f"FROM {quoted(target, table)} ORDER BY id"
            ).fetchall()
        ]


def spec_for(target, **over: Any) -> dict:
    """A ``tables`` entry for the queue ``emails`` on the test's table."""
    spec = {
        "table": table_name(target),
        "task": "tests.apps.proj.mark",
        "columns": dict(COLUMNS),
        "max_attempts": 3,
        "visibility_timeout": 30,
        "backoff_base": 0.05,
    }
    spec.update(over)
    return spec
