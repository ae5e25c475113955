"""Table queues on PostgreSQL (:class:`~kombu_alkstore.tables.queue.TableQueue`): the
statements of ``tables.sql`` on the store's pool, ``FOR UPDATE SKIP LOCKED`` claims."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg.rows import dict_row

from ...errors import ConfigurationError
from ...tables.queue import Run, TableQueue


def quote(name: str) -> str:
    """A table or column name as a PostgreSQL identifier: each dot-separated part in
    double quotes, a quote inside doubled (``schema.table`` names a schema's table)."""
    if "\x00" in name:
        raise ConfigurationError(f"name {name!r} holds a NUL character")
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


class PostgresTableQueue(TableQueue):
    """A table queue in a PostgreSQL database (the store's)."""

    sql_file = (__package__, "tables.sql")

    def quote(self, name: str) -> str:
        return quote(name)

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        """A transaction on a pooled connection of the store (never a caller's)."""
        with (
            self.store._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):

            def run(key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
                cur.execute(self.sql[key], params)
                return cur.fetchall() if cur.description is not None else []

            yield run

    def engine_params(self) -> dict[str, Any]:
        return {"channel": self.store.statements.channel}  # the waiter's (waiter.py)

    def reflect_name(self, table: str) -> str:
        return quote(table)  # to_regclass() reads it as SQL would
