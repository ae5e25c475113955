"""Table queues on SQLite (:class:`~kombu_alkstore.tables.queue.TableQueue`): the
statements of ``tables.sql`` in the store's write transaction (one writer at a time
keeps claims apart); the table lives in the broker's database file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...errors import ConfigurationError
from ...tables.queue import Run, TableQueue
from .connection import execute


def quote(name: str) -> str:
    """A table or column name as an SQLite identifier: in double quotes, a quote inside
    doubled (a dot is part of the name: the table is in the broker's file)."""
    if "\x00" in name:
        raise ConfigurationError(f"name {name!r} holds a NUL character")
    return '"' + name.replace('"', '""') + '"'


class SQLiteTableQueue(TableQueue):
    """A table queue in the broker's SQLite file."""

    sql_file = (__package__, "tables.sql")

    def quote(self, name: str) -> str:
        return quote(name)

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        """The store's write transaction (BEGIN IMMEDIATE)."""
        with self.store._write() as conn:

            def run(key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
                return [dict(r) for r in execute(conn, self.sql[key], params).fetchall()]

            yield run
