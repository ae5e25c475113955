"""The result backend on SQLite: statements of ``results.sql`` under the store's write
lock, and a listener that checks ``PRAGMA data_version`` on a connection of its own."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..ambient import AMBIENT
from ..resultstore import ANY, Cleanup, ResultListener, ResultStore, chunks
from ..sqlfile import load_queries
from .connection import connect, execute

if TYPE_CHECKING:
    from .store import SQLiteStore

_REQUIRED = [
    "get_many",
    "put",
    "delete",
    "expire",
    "cleanup_results",
    "cleanup_parts",
    "cleanup_chords",
    "chord_size",
    "chord_add",
    "chord_lock",
    "chord_insert_part",
    "chord_count",
    "chord_parts",
    "chord_done",
    "chord_get",
    "by_task",
]


class SQLiteResults(ResultStore):
    """Results in a :class:`SQLiteStore`'s file, on its connection (writes under
    ``BEGIN IMMEDIATE``, or inside the caller's bound transaction)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._sql = load_queries(__package__, "results.sql", store.names, required=_REQUIRED)
        self.connection_errors = store.connection_errors
        self.statements: Counter[str] = Counter()
        self.cleanup_batch = store.options.maintenance_batch
        #: How often the listener checks the file's data version (seconds).
        self.poll_interval = 0.005

    def _exec(self, conn: Any, key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        self.statements[key] += 1
        return execute(conn, self._sql[key], {"now": time.time(), **params}).fetchall()

    def _read(self, key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._store._read() as conn:
            return self._exec(conn, key, params)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Callable]:
        with self._store._write() as conn:
            yield lambda key, params: self._exec(conn, key, params)

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for part in chunks(list(keys)):
            for row in self._read("get_many", {"keys": json.dumps(list(part))}):
                out[row["key"]] = bytes(row["value"])
        return out

    def put(self, key, value, state, task_id, expires_at, keep_success=False) -> None:
        params = {"key": key, "value": value, "state": state, "task_id": task_id}
        params["keep_success"] = bool(keep_success)
        self._read("put", {**params, "expires_at": expires_at})  # one statement: atomic

    def delete(self, keys: Sequence[str]) -> None:
        for part in chunks(list(keys)):
            self._read("delete", {"keys": json.dumps(list(part))})

    def expire(self, key: str, expires_at: float | None) -> None:
        self._read("expire", {"key": key, "expires_at": expires_at})

    def _cleanup_batch(self, batch: int) -> Cleanup:
        now = {"now": time.time(), "batch": int(batch)}
        with self._store._write() as conn:
            results = execute(conn, self._sql["cleanup_results"], now).rowcount
            parts = execute(conn, self._sql["cleanup_parts"], now).rowcount
            chords = execute(conn, self._sql["cleanup_chords"], now).rowcount
        self.statements["cleanup"] += 1
        return Cleanup(results, chords, parts)

    def chord_size(self, group_id: str, size: int, expires_at: float | None) -> None:
        params = {"group_id": group_id, "size": int(size), "expires_at": expires_at}
        with self._transaction() as run:
            run("chord_size", params)

    def chord_add(self, group_id: str, count: int, expires_at: float | None) -> None:
        params = {"group_id": group_id, "count": int(count), "expires_at": expires_at}
        with self._transaction() as run:
            run("chord_add", params)

    def chord_state(self, group_id: str) -> tuple[int | None, int, int, bool] | None:
        rows = self._read("chord_get", {"group_id": group_id})
        if not rows:
            return None
        r = rows[0]
        return r["size"], r["extra"], r["done"], bool(r["fired"])

    @contextlib.contextmanager
    def chord_part(
        self, group_id, task_id, index, value, bind, expires_at
    ) -> Iterator[list[bytes] | None]:
        # BEGIN IMMEDIATE holds the file's write lock for the whole block: the part, the
        # count and (bind) the callback's publish through this connection commit together.
        params = {
            "group_id": group_id,
            "task_id": task_id,
            "idx": int(index),
            "value": value,
            "expires_at": expires_at,
        }
        with self._store._write() as conn:
            token = AMBIENT.set(conn) if bind and AMBIENT.get() is None else None
            try:
                run = functools.partial(self._exec, conn)
                fired = run("chord_lock", params)[0]["fired"]
                # Recorded even when the chord fired already: the part of a run of the
                # same chord again, counted when its size is set (chord_size).
                if not run("chord_insert_part", params) or fired:
                    yield None  # recorded before, or fired already
                    return
                counted = run("chord_count", params)
                if not counted or not counted[0]["fired"]:
                    yield None
                    return
                yield [bytes(r["value"]) for r in run("chord_parts", params)]
                run("chord_done", params)
            finally:
                if token is not None:
                    AMBIENT.reset(token)

    def by_task(self, task_id: str) -> list[dict[str, Any]]:
        rows = self._read("by_task", {"task_id": task_id})
        return [{**r, "value": bytes(r["value"])} for r in rows]

    def listener(self) -> SQLiteResultListener:
        return SQLiteResultListener(self._store, self.poll_interval)


class SQLiteResultListener(ResultListener):
    """Checks the file's ``PRAGMA data_version`` (a change by any connection of any
    process but its own) every ``interval`` s; a change means "read the watched results
    again" (:data:`ANY`): SQLite cannot say which rows changed."""

    def __init__(self, store: SQLiteStore, interval: float) -> None:
        self._conn = connect(store.path, store.options.busy_timeout)
        self._sql = store._sql["data_version"]
        self._interval = interval
        self._version = self._read()
        self._wake = threading.Event()
        self._owner = os.getpid()

    def _read(self) -> int:
        return self._conn.execute(self._sql).fetchone()["data_version"]

    def wait(
        self, timeout: float, interrupted: Callable[[], bool]
    ) -> dict[str, bytes | None] | str:
        end = time.monotonic() + max(timeout, 0)
        while True:
            version = self._read()
            if version != self._version:
                self._version = version
                return ANY
            left = end - time.monotonic()
            if left <= 0 or interrupted():
                return {}
            if self._wake.wait(min(self._interval, left)):
                self._wake.clear()

    def interrupt(self) -> None:
        self._wake.set()

    def close(self) -> None:
        if os.getpid() == self._owner:
            with contextlib.suppress(Exception):
                self._conn.close()
