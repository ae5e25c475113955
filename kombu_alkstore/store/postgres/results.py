"""The result backend on PostgreSQL: statements of ``results.sql`` on the store's pool,
and the one LISTEN connection per process that hears stored results."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import select
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ..ambient import AMBIENT
from ..options import parse_store_url
from ..resultstore import ANY, Cleanup, ResultListener, ResultStore, chunks
from ..sqlfile import load_queries
from .waiter import _waiters

if TYPE_CHECKING:
    from .store import PostgresStore

_REQUIRED = [
    "get_many",
    "put",
    "delete",
    "expire",
    "cleanup",
    "chord_size",
    "chord_add",
    "chord_step",
    "chord_parts",
    "chord_done",
    "chord_get",
    "by_task",
]


class PostgresResults(ResultStore):
    """Results on a :class:`PostgresStore`'s durable pool (or the caller's bound
    connection, as every store call). A stored task result NOTIFYs
    ``alkstore_results_<schema>`` with the task id in the same statement."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._sql = load_queries(__package__, "results.sql", store.names, required=_REQUIRED)
        #: The NOTIFY channel of stored results (bound as a parameter to pg_notify).
        self.channel = f"alkstore_results_{store.options.schema}"
        self.connection_errors = store.connection_errors
        self.statements: Counter[str] = Counter()
        self.cleanup_batch = store.options.maintenance_batch

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        params = {"now": time.time(), "results_channel": self.channel, **params}
        return self._store.statements.params(params)

    def _rows(self, key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        text, args = self._sql[key], self._params(params)
        self.statements[key] += 1

        def work(conn: psycopg.Connection) -> list[dict[str, Any]]:
            cur = conn.cursor(row_factory=dict_row).execute(text, args)
            return cur.fetchall() if cur.description else []

        return self._store._with_conn(work, key)

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for part in chunks(list(keys)):
            for row in self._rows("get_many", {"keys": list(part)}):
                out[row["key"]] = bytes(row["value"])
        return out

    def put(self, key, value, state, task_id, expires_at, keep_success=False) -> None:
        params = {"key": key, "value": value, "state": state, "task_id": task_id}
        params["keep_success"] = bool(keep_success)
        self._rows("put", {**params, "expires_at": expires_at})

    def delete(self, keys: Sequence[str]) -> None:
        for part in chunks(list(keys)):
            self._rows("delete", {"keys": list(part)})

    def expire(self, key: str, expires_at: float | None) -> None:
        self._rows("expire", {"key": key, "expires_at": expires_at})

    def _cleanup_batch(self, batch: int) -> Cleanup:
        row = self._rows("cleanup", {"batch": int(batch)})[0]
        return Cleanup(row["results"], row["chords"], row["parts"])

    def chord_size(self, group_id: str, size: int, expires_at: float | None) -> None:
        self._rows(
            "chord_size", {"group_id": group_id, "size": int(size), "expires_at": expires_at}
        )

    def chord_add(self, group_id: str, count: int, expires_at: float | None) -> None:
        params = {"group_id": group_id, "count": int(count), "expires_at": expires_at}
        self._rows("chord_add", params)

    def chord_state(self, group_id: str) -> tuple[int | None, int, int, bool] | None:
        rows = self._rows("chord_get", {"group_id": group_id})
        if not rows:
            return None
        r = rows[0]
        return r["size"], r["extra"], r["done"], bool(r["fired"])

    @contextlib.contextmanager
    def _transaction(self, bind: bool = False) -> Iterator[Callable]:
        """A transaction on a pooled connection (or inside the caller's bound one);
        yields ``run(key, params) -> rows``; with ``bind``, every store call of the block
        (a publish) goes through it too."""
        ambient = AMBIENT.get()
        with contextlib.ExitStack() as stack:
            if ambient is not None:
                conn = self._store._adopt(ambient)
            else:
                conn = stack.enter_context(self._store._pool.connection())
            stack.enter_context(conn.transaction())
            if bind and ambient is None:
                token = AMBIENT.set(conn)
                stack.callback(AMBIENT.reset, token)
            cur = conn.cursor(row_factory=dict_row)

            def run(key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
                self.statements[key] += 1
                cur.execute(self._sql[key], self._params(params))
                return cur.fetchall() if cur.description else []

            yield run

    @contextlib.contextmanager
    def chord_part(
        self, group_id, task_id, index, value, bind, expires_at
    ) -> Iterator[list[bytes] | None]:
        params = {
            "group_id": group_id,
            "task_id": task_id,
            "idx": int(index),
            "value": value,
            "expires_at": expires_at,
        }
        with self._transaction(bind) as run:
            counted = run("chord_step", params)
            if not counted or not counted[0]["fired"]:
                yield None  # recorded before, fired already, or parts still to come
                return
            parts = [bytes(r["value"]) for r in run("chord_parts", params)]
            yield parts
            run("chord_done", params)

    def by_task(self, task_id: str) -> list[dict[str, Any]]:
        rows = self._rows("by_task", {"task_id": task_id})
        return [{**r, "value": bytes(r["value"])} for r in rows]

    def listener(self) -> PostgresResultListener:
        return PostgresResultListener(self._store, self.channel)


class PostgresResultListener(ResultListener):
    """A dedicated autocommit connection (``listen_url`` when set: LISTEN needs a
    session, which a transaction-mode pooler does not keep) LISTENing on the results
    channel; a pipe wakes its ``select`` when a new waiter arrives."""

    def __init__(self, store: PostgresStore, channel: str) -> None:
        direct = store.options.listen_url
        conninfo = parse_store_url(direct).conninfo if direct else store.url.conninfo
        self._conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
        _waiters.add(self)  # closed with the others by close_all_stores()
        self._owner = os.getpid()
        # LISTEN takes no parameter: the channel (a validated schema name) is quoted.
        self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._lock = threading.Lock()

    def wait(
        self, timeout: float, interrupted: Callable[[], bool]
    ) -> dict[str, bytes | None] | str:
        ids: dict[str, bytes | None] = {}
        ready, _, _ = select.select([self._conn.fileno(), self._wake_r], [], [], max(timeout, 0))
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
        # Always drain what the connection holds (a notification read with an earlier
        # answer waits in it, unseen by select).
        for note in self._conn.notifies(timeout=0, stop_after=None):
            try:
                payload = json.loads(note.payload)
                task_id = payload[0]
                ids[task_id] = base64.b64decode(payload[1]) if len(payload) > 1 else None
            except (ValueError, TypeError, IndexError, binascii.Error):
                return ANY  # not ours to parse: read everything watched
        return ids

    def interrupt(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        if os.getpid() == self._owner:
            with contextlib.suppress(Exception):
                self._conn.close()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


__all__ = ["ANY", "PostgresResultListener", "PostgresResults"]
