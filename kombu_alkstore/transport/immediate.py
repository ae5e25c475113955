"""The claims interface on the blocking store, for the callers that may not pipeline.

The event loop's operations (ack, hand back, heartbeat, due checks, queue refresh, the
lease) have one spelling, the claims interface of :class:`~kombu_alkstore.store.ClaimSession`
(``operation(args..., callback)``). In the event loop's thread on an engine with a claims
session they are pipelined on it and answered later; everywhere else (another thread, no
event loop, an engine without a session) :class:`ImmediateClaims` runs them at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..store import Delivery, Store

Answer = Callable[[Any], None]


class ImmediateClaims:
    """Each operation runs on ``store`` (a pooled connection) before it returns and
    calls ``callback`` with its result; an error is raised to the caller, as the blocking
    call would raise it, and the callback is not called."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def ack(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        callback(self.store.ack(deliveries))

    def release(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        callback(self.store.release(deliveries))

    def heartbeat(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        callback(self.store.heartbeat(deliveries))

    def has_due(self, queues: Sequence[str], callback: Answer) -> None:
        callback(self.store.has_due(queues))

    def next_due(self, queues: Sequence[str], callback: Answer) -> None:
        callback(self.store.next_due(queues))

    def touch_queues(self, queues: Sequence[str], callback: Answer) -> None:
        callback(self.store.touch_queues(queues))

    def lease_acquire(self, name: str, owner: str, ttl: float, callback: Answer) -> None:
        callback(self.store.lease_acquire(name, owner, ttl))
