"""Fixtures for transactional-publish tests: a business table in the broker's database."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest


class Business:
    """The application side of a test: an ``orders`` table next to the broker's tables
    (in the test's PostgreSQL schema, or in the same SQLite file) and its connections."""

    def __init__(self, target) -> None:
        self.target = target
        self.engine = target.engine
        if self.engine == "postgresql":
            self.orders = f'"{target.schema}".orders'
            self.path = None
        else:
            self.orders = "orders"
            self.path = target.url[len("sqlite:///") :]

    # ------------------------------------------------------------- connections
    def connect(self, **kwargs: Any) -> Any:
        """A caller connection as an application would open it (driver defaults:
        psycopg non-autocommit, sqlite3 in its legacy implicit-transaction mode)."""
        if self.engine == "postgresql":
            return psycopg.connect(self.target.url, **kwargs)
        return sqlite3.connect(self.path, **kwargs)

    def other_database(self, tmp_path) -> Any:
        """A connection to a different database than the broker's."""
        if self.engine == "postgresql":
            url = self.target.url.rsplit("/", 1)[0] + "/postgres"
            return psycopg.connect(url)
        return sqlite3.connect(str(tmp_path / "elsewhere.db"))

    @property
    def sqlalchemy_url(self) -> str:
        if self.engine == "postgresql":
            return self.target.url.replace("postgresql://", "postgresql+psycopg://", 1)
        return self.target.url

    # ------------------------------------------------------------------ orders
    def create_table(self) -> None:
        with self._autocommit() as conn:
            kind = "serial" if self.engine == "postgresql" else "INTEGER"
            conn.execute(f"CREATE TABLE {self.orders} (id {kind} PRIMARY KEY, item TEXT)")

    def insert(self, conn: Any, item: str) -> int:
        """Insert an order on the caller's connection (inside its transaction)."""
        ph = "%s" if self.engine == "postgresql" else "?"
        return conn.execute(
            f"INSERT INTO {self.orders} (item) VALUES ({ph}) RETURNING id", (item,)
        ).fetchone()[0]

    def items(self) -> list[str]:
        """Committed orders, read on a fresh connection (what a worker would see)."""
        with self._autocommit() as conn:
            return [r[0] for r in conn.execute(f"SELECT item FROM {self.orders} ORDER BY id")]

    @contextmanager
    def _autocommit(self) -> Iterator[Any]:
        if self.engine == "postgresql":
            with psycopg.connect(self.target.url, autocommit=True) as conn:
                yield conn
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            try:
                yield conn
            finally:
                conn.close()

    @staticmethod
    def live(store, queue: str = "celery") -> int:
        """Jobs in ``queue`` in any live state (pending, delayed, processing)."""
        return sum(c.pending + c.delayed + c.processing for c in store.counts([queue]))

    @contextmanager
    def savepoint(self, conn: Any, rollback: bool) -> Iterator[None]:
        """A savepoint on the caller's connection, rolled back or released at the end."""
        if self.engine == "postgresql":
            with conn.transaction(force_rollback=rollback):
                yield
            return
        conn.execute("SAVEPOINT sp")
        yield
        conn.execute("ROLLBACK TO sp" if rollback else "RELEASE sp")
        if rollback:
            conn.execute("RELEASE sp")


@pytest.fixture
def biz(target) -> Iterator[Business]:
    with target.open():  # the broker's tables (and, on PostgreSQL, its schema) first
        pass
    b = Business(target)
    b.create_table()
    yield b


@pytest.fixture
def sqlite_biz(sqlite_target) -> Business:
    with sqlite_target.open():
        pass
    b = Business(sqlite_target)
    b.create_table()
    return b
