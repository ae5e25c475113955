"""One listener per process and database, shared by every waiting ``get()``.

Celery gives each thread its own backend (``app.backend`` is thread-local) and each
backend its own result consumer; they all register the task ids they wait for here. At
any time one thread (whichever called :meth:`Watcher.drain` first) waits on the
listener and reads; the others wait on a condition that it signals after each round.

What it costs: no statement per waiter. A round reads, in one statement per 1,000 keys,
the results of (a) ids that started being watched since the last round (they may have
been stored before the listener heard of them), (b) the ids a notification named
(PostgreSQL, when the notification did not carry the value itself) or every watched id
after a change of the file (SQLite), and (c) every
watched id once per ``fallback_interval`` (a safety net for a notification lost with a
connection). Each read's kind and count are in :attr:`Watcher.reads`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import Counter
from typing import Any, Protocol

from ..store.resultstore import ANY, ResultListener, ResultStore

logger = logging.getLogger(__name__)


class Interested(Protocol):
    """A consumer of results (``consumer.ResultConsumer``)."""

    def on_value(self, key: str, value: bytes, every_state: bool) -> bool:
        """A stored value for ``key``; True when it made a waiter ready."""


class Watcher:
    """The task keys waited for in this process on one result store, and its listener."""

    def __init__(self, tables: ResultStore, fallback_interval: float) -> None:
        self.tables = tables
        self.fallback_interval = fallback_interval
        self._lock = threading.Lock()
        self._round = threading.Condition(self._lock)
        #: key -> the consumers waiting for it (by identity).
        self._interest: dict[str, dict[int, Interested]] = {}
        #: task id -> its keys (a notification names the task id).
        self._keys: dict[str, set[str]] = {}
        self._fresh: set[str] = set()
        self._reading = False
        self._listener: ResultListener | None = None
        self._next_fallback = time.monotonic() + fallback_interval
        #: Reads made, by why: "fresh", "notified", "changed", "fallback" (statements).
        self.reads: Counter[str] = Counter()
        #: Rounds the reading thread made (a wait on the listener each).
        self.rounds = 0
        #: Values handed over straight from a notification (no read).
        self.carried = 0
        self._pid = os.getpid()

    # ----------------------------------------------------------------- interest
    def watch(self, task_id: str, key: str, consumer: Interested) -> None:
        """Wait for ``key`` (task ``task_id``); read at the next round, then on change."""
        with self._lock:
            self._interest.setdefault(key, {})[id(consumer)] = consumer
            self._keys.setdefault(task_id, set()).add(key)
            self._fresh.add(key)
            listener = self._listener if self._reading else None
        if listener is not None:
            listener.interrupt()

    def unwatch(self, task_id: str, key: str, consumer: Interested) -> None:
        with self._lock:
            waiting = self._interest.get(key)
            if waiting is not None:
                waiting.pop(id(consumer), None)
                if not waiting:
                    del self._interest[key]
                    keys = self._keys.get(task_id)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del self._keys[task_id]
                    self._fresh.discard(key)

    def watched(self) -> int:
        with self._lock:
            return len(self._interest)

    # -------------------------------------------------------------------- drain
    def drain(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` s for results of watched keys and hand them to their
        consumers; returns early after a round that made a waiter ready."""
        timeout = 1.0 if timeout is None else max(timeout, 0.0)
        with self._lock:
            if self._reading:
                self._round.wait(timeout)
                return
            self._reading = True
        try:
            self._drain(timeout)
        finally:
            with self._lock:
                self._reading = False
                self._round.notify_all()

    def _drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            listener = self._ensure_listener()
            while True:
                if self._read_fresh():
                    return
                now = time.monotonic()
                if now >= self._next_fallback:
                    self._next_fallback = now + self.fallback_interval
                    if self._read(self._all_keys(), "fallback", every_state=False):
                        return
                left = min(deadline, self._next_fallback) - now
                if deadline - now <= 0:
                    return
                changed = listener.wait(max(left, 0.0), self._has_fresh)
                self.rounds += 1
                if changed == ANY:
                    if self._read(self._all_keys(), "changed", every_state=True):
                        return
                elif changed and self._notified(changed):
                    return
                if time.monotonic() >= deadline:
                    return
        except self.tables.connection_errors as exc:
            logger.warning("alkstore results: lost the database (%s); reconnecting", exc)
            self._drop_listener()
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))

    def _has_fresh(self) -> bool:
        return bool(self._fresh)

    def _ensure_listener(self) -> ResultListener:
        if self._listener is None:
            listener = self.tables.listener()
            with self._lock:
                self._listener = listener
                # Anything stored while no listener listened was not heard: read all.
                self._fresh.update(self._interest)
        return self._listener

    def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def close(self) -> None:
        self._drop_listener()

    # -------------------------------------------------------------------- reads
    def _all_keys(self) -> list[str]:
        with self._lock:
            return list(self._interest)

    def _keys_of(self, task_ids: set[str]) -> list[str]:
        with self._lock:
            return [k for t in task_ids for k in self._keys.get(t, ())]

    def _read_fresh(self) -> bool:
        with self._lock:
            fresh, self._fresh = self._fresh, set()
        return bool(fresh) and self._read(sorted(fresh), "fresh", every_state=True)

    def _notified(self, changed: dict[str, bytes | None]) -> bool:
        """Hand over the values the notifications carried; read the others (one
        statement for all of them)."""
        carried: dict[str, bytes] = {}
        unread: list[str] = []
        with self._lock:
            for task_id, value in changed.items():
                for key in self._keys.get(task_id, ()):
                    if value is None:
                        unread.append(key)
                    else:
                        carried[key] = value
        ready = self._deliver(carried, every_state=True)
        self.carried += len(carried)
        return self._read(unread, "notified", every_state=True) or ready

    def _read(self, keys: list[str], why: str, every_state: bool) -> bool:
        if not keys:
            return False
        values = self.tables.get_many(keys)
        self.reads[why] += 1
        return self._deliver(values, every_state)

    def _deliver(self, values: dict[str, bytes], every_state: bool) -> bool:
        ready = False
        for key, value in values.items():
            with self._lock:
                consumers = list(self._interest.get(key, {}).values())
            for consumer in consumers:
                try:
                    ready = consumer.on_value(key, value, every_state) or ready
                except Exception:  # one bad value must not stop the others' delivery
                    logger.exception("alkstore results: cannot deliver %r", key)
        return ready


_watchers: weakref.WeakKeyDictionary[Any, Watcher] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def watcher_for(tables: ResultStore, fallback_interval: float) -> Watcher:
    """The process's watcher on ``tables`` (stores are per process: a forked child opens
    its own store, so it gets its own watcher and listener)."""
    with _watchers_lock:
        found = _watchers.get(tables)
        if found is None:
            found = _watchers[tables] = Watcher(tables, fallback_interval)
        return found


def close_all_watchers() -> int:
    """Close every watcher's listener in this process and forget the watchers (for test
    suites, between tests, beside ``close_all_stores``); returns how many there were."""
    with _watchers_lock:
        found = list(_watchers.values())
        _watchers.clear()
    for watcher in found:
        watcher.close()
    return len(found)
