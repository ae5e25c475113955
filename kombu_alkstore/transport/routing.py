"""A per-connection cache of exchanges and bindings kept in the store.

Publishing does not query the bindings each time: the cache re-reads them when the
store's routing version moves, when this process changes a binding, and once more before
a direct publish would find no queue. The version is checked at most every ``POLL_TTL``
seconds, except while a LISTEN connection of this process is up: that connection is told
of every change (``"routing"`` on the store's channel) and each new one starts from an
empty cache, so no check is needed, and an idle worker holds no connection for it.
"""

from __future__ import annotations

import math
import threading
import time

from kombu.transport.virtual.exchange import TopicExchange

from ..store import Store

_topic_pattern = TopicExchange(None).key_to_pattern


class RoutingCache:
    #: Seconds between routing-version checks when no change notices arrive.
    POLL_TTL = 0.5

    @classmethod
    def for_store(cls, store: Store) -> RoutingCache:
        """The process-wide cache for ``store`` (shared by all its connections)."""
        cache = getattr(store, "_routing_cache", None)
        if cache is None:
            cache = cls(store)
            store._routing_cache = cache  # type: ignore[attr-defined]
        return cache

    def __init__(self, store: Store, ttl: float = POLL_TTL) -> None:
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()
        self._version: int | None = None
        self._checked = 0.0
        self._tables: dict[str, list[tuple[str, str, str]]] = {}
        self._types: dict[str, str | None] = {}
        self._listeners = 0

    def listening(self, delta: int) -> None:
        """A LISTEN connection that announces routing changes started (+1) or stopped (-1).

        Either way the cache starts over: a new listener cannot know what changed before it
        listened, and without one the version is polled again.
        """
        with self._lock:
            self._listeners = max(0, self._listeners + delta)
            self.ttl = math.inf if self._listeners else self.POLL_TTL
            self._checked = 0.0
            self._version = None

    def _fresh(self) -> None:
        now = time.monotonic()
        if self._version is not None and now - self._checked < self.ttl:
            return
        with self.store.detached():  # committed routing only
            version = self.store.routing_version()
        with self._lock:
            self._checked = now
            if version != self._version:
                self._version = version
                self._tables.clear()
                self._types.clear()

    def invalidate(self) -> None:
        with self._lock:
            self._checked = 0.0
            self._version = None

    def type(self, exchange: str) -> str | None:
        self._fresh()
        if exchange not in self._types:
            with self.store.detached():  # committed routing only
                self._types[exchange] = self.store.exchange_type(exchange)
        return self._types[exchange]

    def table(self, exchange: str) -> list[tuple[str, str, str]]:
        """``(routing_key, pattern, queue)`` rows, the layout kombu's exchange types expect."""
        self._fresh()
        rows = self._tables.get(exchange)
        if rows is None:
            with self.store.detached():  # committed routing only
                bound = self.store.bindings(exchange)
            rows = [(rk, _topic_pattern(rk), q) for rk, q in bound]
            self._tables[exchange] = rows
        return rows
