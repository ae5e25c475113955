"""The claim session interface: claims and acks answered from an event loop, on one
connection (engines with the ``session`` capability implement :class:`ClaimSession`)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from .admin import RatePoint
from .values import Delivery

#: Called with a statement's outcome, or with the exception it raised.
Answer = Callable[[Any], None]


class ClaimSession(abc.ABC):
    """Claims, acks and a worker's slow timers on one connection, sent without waiting
    and answered by callback from :meth:`on_readable` (engines with the ``session``
    capability).

    Each request is its own transaction, run in send order; every callback is called
    exactly once, with the outcome or with the exception (one of the store's
    ``connection_errors`` when the connection was lost: the effect is then unknown,
    which at-least-once delivery allows). Not thread-safe: one thread (an event loop's)
    sends and reads.
    """

    @abc.abstractmethod
    def fileno(self) -> int:
        """The socket to register with the event loop as a reader."""

    @abc.abstractmethod
    def on_readable(self) -> None:
        """Read what arrived; run the callbacks of the answered requests."""

    @abc.abstractmethod
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""

    @abc.abstractmethod
    def wait(self) -> None:
        """Block until every request in flight is answered (at close)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection; the callbacks still waiting get the error."""

    @abc.abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        callback: Callable[[list[Delivery] | BaseException, bool], None],
    ) -> None:
        """:meth:`Store.claim` in one statement: ``callback(deliveries, more)`` where
        ``more`` says spent jobs took places (more may be due)."""

    @abc.abstractmethod
    def ack(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.ack`: ``callback`` gets the set of ids whose ack landed."""

    @abc.abstractmethod
    def write_rates(
        self, rows: Sequence[RatePoint], trim_before: float | None, callback: Answer
    ) -> None:
        """Add counted rows (:meth:`Store._write_rates`) and, with ``trim_before``, trim
        (:meth:`Store.trim_rates`); ``callback`` gets None per statement sent."""

    @abc.abstractmethod
    def release(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.release`: ``callback`` gets the set of ids handed back."""

    @abc.abstractmethod
    def has_due(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.has_due`: ``callback`` gets a bool."""

    @abc.abstractmethod
    def heartbeat(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.heartbeat` (each job by its own visibility timeout): ``callback``
        gets the set of ids still held."""

    @abc.abstractmethod
    def next_due(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.next_due`: ``callback`` gets the epoch seconds, or None."""

    @abc.abstractmethod
    def touch_queues(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.touch_queues`: ``callback`` gets the set of names that exist."""

    @abc.abstractmethod
    def lease_acquire(self, name: str, owner: str, ttl: float, callback: Answer) -> None:
        """:meth:`Store.lease_acquire`: ``callback`` gets a bool."""

    @abc.abstractmethod
    def register(
        self, address: int, chan: int, queues: Sequence[str], slots: int, callback: Answer
    ) -> None:
        """Offer ``slots`` of channel ``chan`` of the waiter at ``address`` to publishers
        of ``queues`` (hand-off); no queues withdraws it. ``callback`` gets whether
        publishers read offers now: False means the store withdrew the offer instead
        (its offers are past what a publish may read, e.g. behind a pinned horizon),
        and no offer stands until one is registered while they read them again."""
