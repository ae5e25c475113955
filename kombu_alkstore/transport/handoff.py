"""Hand-off: idle channels offer their free slots, publishers hand them due jobs.

A channel whose last claim left no backlog offers its free prefetch slots to publishers
of its queues (:meth:`ClaimSession.register`). A publisher of a due job then claims it
for the offer inside its INSERT and the notification carries the job, so the consumer
starts it without a claim round trip (engines with the ``handoff`` capability; the wire
format is the engine's). Everything the transport knows about offers lives here.

Guarantees: a channel's offer never exceeds its free slots; a claim withdraws its
channel's offer before it is sent (the claim takes every free slot); a job handed to a
channel that can no longer take it (closed, claiming, cancelled, full) is handed back
with its attempt refunded, never dropped.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..store import Delivery, Wakeup
from . import revokes

logger = logging.getLogger("kombu_alkstore")


@dataclass
class Offer:
    """What one channel offers, as this connection knows it."""

    #: The channel's last claim left no backlog: its free slots may be offered.
    idle: bool = False
    #: Slots publishers may still fill; a hand-off taken decrements it.
    slots: int = 0
    queues: tuple[str, ...] = ()


class Handoff:
    """The offers of one kombu connection's channels, and the jobs handed to them."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        #: Turned off when the offers cannot be made (e.g. tables older than hand-off).
        self.enabled: bool = transport.options.handoff
        self._offers: weakref.WeakKeyDictionary[Any, Offer] = weakref.WeakKeyDictionary()

    def _offer(self, channel: Any) -> Offer:
        offer = self._offers.get(channel)
        if offer is None:
            offer = self._offers[channel] = Offer()
        return offer

    def claimed(self, channel: Any, full: bool) -> None:
        """A claim of ``channel`` was answered: it is idle unless it left a backlog."""
        self._offer(channel).idle = not full
        self.update(channel)

    def behind(self, channel: Any) -> None:
        """Due work waits for ``channel``, which cannot take it now (no free slot): no
        offer until a claim of its own leaves no backlog, or a new job handed to a slot
        that frees would overtake the older one waiting."""
        self.claimed(channel, True)

    def before_claim(self, channel: Any) -> None:
        """A claim is about to take every free slot of ``channel``: withdraw its offer
        first (the session keeps the order)."""
        offer = self._offer(channel)
        if offer.slots:
            offer.idle = False
            self.update(channel)

    def update_idle(self) -> None:
        """Acks freed slots: offer them (each event-loop tick)."""
        for channel in self.transport.channels:  # each tick: no weak-dict iteration
            offer = self._offers.get(channel)
            if offer is not None and offer.idle:
                self.update(channel)

    def update(self, channel: Any) -> None:
        """Keep what ``channel`` offers in line with its state: its free slots while it
        is idle and consuming, nothing otherwise. Sent only when it changes, without
        waiting; from another thread (a cancel) nothing is sent: the offer goes at close
        (``Waiter.retire``)."""
        t = self.transport
        session, waiter = t.loop_claims(), t.waiter
        address = waiter.address if waiter is not None else None
        if session is None or address is None or not self.enabled:
            return
        offer = self._offer(channel)
        queues: tuple[str, ...] = ()
        if offer.idle and not channel.closed and channel._consumers:
            queues = tuple(sorted(channel._active_queues))
        slots = channel.free_slots() if queues else 0
        if (slots, queues if slots else ()) == (offer.slots, offer.queues):
            return
        offer.slots, offer.queues = slots, queues if slots else ()
        session.register(address, channel.channel_id, offer.queues, slots, self._answered)

    def _answered(self, outcome: Any) -> None:
        if isinstance(outcome, self.transport.store_errors()):
            return  # the claims in flight report the lost connection
        if isinstance(outcome, BaseException):
            logger.warning("alkstore: hand-off disabled on this connection: %r", outcome)
            self.enabled = False

    def take(self, wake: Wakeup) -> None:
        """Deliver the jobs publishers handed to this connection's channels, in the
        order they were handed; the rest go back."""
        if not wake.handoffs:
            return
        t = self.transport
        by_id = {ch.channel_id: ch for ch in t.channels}
        orphans = []
        mine: dict[Any, list[Delivery]] = {}
        for chan, delivery in wake.handoffs:
            channel = by_id.get(chan)
            if channel is None:
                orphans.append(delivery)
            else:
                mine.setdefault(channel, []).append(delivery)
        t.hand_back(orphans)
        for channel, deliveries in mine.items():
            # Read late? Checked once for all of them; then held, so heartbeated while
            # earlier ones run (inline pools).
            deliveries = t.still_claimed(deliveries, channel._no_ack_queues)
            channel.hold(deliveries)
            pending = deque(deliveries)
            read_at = time.monotonic()
            try:
                while pending:
                    self._deliver(channel, pending.popleft())
                    read_at = revokes.recheck_if_stale(t.store, read_at, pending)
            except BaseException:  # not delivered: no longer held, their claims lapse
                channel.unhold(pending)
                raise

    def _deliver(self, channel: Any, delivery: Delivery) -> None:
        """One job handed to ``channel``'s offer, already claimed for it."""
        offer = self._offer(channel)
        offer.slots = max(offer.slots - 1, 0)
        if (
            channel.closed
            or channel.claiming  # the claim in flight was sized to every free slot
            or delivery.queue not in channel._active_queues
            or not channel.qos.can_consume()
        ):
            channel.unhold([delivery])
            self.transport.hand_back([delivery])  # the offer changed on the job's way
            return
        channel._dispatch([delivery])
