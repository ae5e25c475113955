"""The engine's sqlite3 connections: how they are opened, and rows by column name."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any


def dict_row(cursor: sqlite3.Cursor, row: tuple) -> dict[str, Any]:
    """A row as a mapping by column name (the row factory of every cursor the engine
    reads from)."""
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def connect(path: str, busy_timeout: float, on_open: Iterable[str] = ()) -> sqlite3.Connection:
    """An autocommit connection to ``path`` (transactions are begun explicitly), usable
    from any thread (callers serialise), with mapping rows; ``on_open`` run first."""
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = dict_row
    deadline = time.monotonic() + busy_timeout
    for sql in on_open:
        _run_waiting(conn, sql, deadline)
    return conn


def _run_waiting(conn: sqlite3.Connection, sql: str, deadline: float) -> None:
    """Run ``sql``, retrying "database is locked" until ``deadline``: SQLite answers
    ``PRAGMA journal_mode = WAL`` on a file another connection is switching to WAL (or
    creating) with SQLITE_BUSY at once, without calling the busy handler, so the
    connection's timeout does not cover it (eight processes opening one new file)."""
    pause = 0.005
    while True:
        try:
            conn.execute(sql)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def execute(conn: sqlite3.Connection, sql: str, params: Mapping[str, Any] | None = None):
    """``sql`` on a new cursor of ``conn`` whose rows are mappings, whatever the
    connection's own row factory (a caller's bound connection keeps its own)."""
    cur = conn.cursor()
    cur.row_factory = dict_row
    return cur.execute(sql, params or {})


def autocommits(conn: sqlite3.Connection) -> bool:
    """True when a statement outside an explicit transaction commits by itself."""
    mode = getattr(conn, "autocommit", None)  # Python 3.12+: True/False, or legacy (-1)
    if mode is True or mode is False:
        return mode
    return conn.isolation_level is None


class MappedConnection:
    """A connection (a caller's, maybe) whose ``execute`` returns mapping rows, for
    code that runs statements on a connection it is handed (:class:`~..schedules.ScheduleTick`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        return execute(self.conn, sql, params)
