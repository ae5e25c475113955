"""Acks batched into one statement per flush (``ack_flush_interval``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..store import StoreOptions, StoreURL, acquire_store, release_store
from .held import after_lapse
from .link import Link

logger = logging.getLogger("kombu_alkstore")


class AckBuffer:
    """Acks batched into one statement, flushed within ``ack_flush_interval``.

    Celery counts a message done once it acks; an ack not yet flushed when the process
    dies is not lost silently: its claim lapses and the message is delivered again
    (at-least-once). Outside the event loop's thread, acks are applied at once.
    """

    def __init__(
        self,
        link: Link,
        flush_interval: float,
        store_url: StoreURL,
        store_options: StoreOptions,
        wrap: Callable[[Any], Any] = lambda store: store,
    ) -> None:
        self.link = link
        self.flush_interval = flush_interval
        #: Where a late ack goes after the connection closed (a store of its own).
        self._store_url = store_url
        self._store_options = store_options
        #: The late ack's store as the connection saw it (its table queues routed).
        self._wrap = wrap
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def add(self, delivery: Any) -> None:
        link = self.link
        with self._lock:
            self._pending.append(delivery)
            deferred = link.in_loop_thread()
            if deferred and not self._scheduled:
                self._scheduled = True
                link.loop.call_later(self.flush_interval, link.guarded(self.flush))
        if not deferred:
            self.flush()

    def waiting(self) -> list[Any]:
        """The claims whose acks wait here to be sent."""
        with self._lock:
            return list(self._pending)

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        if not batch:
            return
        claims = self.link.claims_here()
        if claims is not None:
            claims.ack(batch, lambda landed: self._landed(batch, landed))
        else:  # a late ack (acks_late) after this connection closed: the claim still holds
            store = acquire_store(self._store_url, self._store_options)
            try:
                self._landed(batch, self._wrap(store).ack(batch))
            finally:
                release_store(store)

    @staticmethod
    def _landed(batch: list[Any], landed: set[int] | BaseException) -> None:
        if isinstance(landed, BaseException):
            logger.warning(
                "alkstore: %d ack(s) may not have landed (%r); a message whose ack did not "
                "land is delivered again after its visibility timeout",
                len(batch),
                landed,
            )
            raise landed
        for d in batch:
            if d.id not in landed:
                # The timeout its publisher stamped, named: a storm of claims lapsing at
                # once (a timeout of milliseconds) explains itself in the worker's log.
                logger.warning(
                    "alkstore: ack of message %s on %r refused: its claim lapsed "
                    "(visibility timeout %s s); %s",
                    d.id,
                    d.queue,
                    d.visibility_timeout,
                    after_lapse(d),
                )
