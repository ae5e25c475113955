"""Hand-off: idle channels offer their free slots, publishers hand them due jobs.

A channel whose last claim left no backlog offers its free prefetch slots to publishers
of its queues (:meth:`ClaimSession.register`). A publisher of a due job then claims it
for the offer inside its INSERT and the notification carries the job, so the consumer
starts it without a claim round trip (engines with the ``handoff`` capability; the wire
format is the engine's). Everything the transport knows about offers lives here.

Guarantees: a channel's offer never exceeds its free slots; a claim withdraws its
channel's offer before it is sent (the claim takes every free slot); a job handed to a
channel that can no longer take it (closed, claiming, cancelled, full) is handed back
with its attempt refunded, never dropped. While the store answers that publishers read
no offers (the hand-off's gate is closed: behind a pinned horizon its offers table grows
past what a publish reads, and the store withdraws every offer instead) the connection
offers nothing for :data:`GATE_RECHECK` seconds, then asks again with its next offer:
its jobs are announced and claimed meanwhile, and its withdrawals still go.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..store import Delivery, Wakeup
from .late import still_claimed
from .link import Link

logger = logging.getLogger("kombu_alkstore")

#: Seconds a connection offers nothing once the store said publishers read no offers.
GATE_RECHECK = 5.0


@dataclass
class Offer:
    """What one channel offers, as this connection knows it."""

    #: The channel's last claim left no backlog: its free slots may be offered.
    idle: bool = False
    #: Slots publishers may still fill; a hand-off taken decrements it.
    slots: int = 0
    queues: tuple[str, ...] = ()
    #: Registers sent for the channel: an answer speaks for the offer if it answers the
    #: last one.
    sent: int = 0


class Handoff:
    """The offers of one kombu connection's channels, and the jobs handed to them."""

    def __init__(self, link: Link, enabled: bool) -> None:
        self.link = link
        #: Turned off when the offers cannot be made (e.g. tables older than hand-off).
        self.enabled = enabled
        self._offers: weakref.WeakKeyDictionary[Any, Offer] = weakref.WeakKeyDictionary()
        #: Until when (monotonic) nothing is offered: the store's gate was closed.
        self._closed_until = 0.0

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
        for channel in self.link.channels:  # each tick: no weak-dict iteration
            offer = self._offers.get(channel)
            if offer is not None and offer.idle:
                self.update(channel)

    def update(self, channel: Any) -> None:
        """Keep what ``channel`` offers in line with its state: its free slots while it
        is idle and consuming, nothing otherwise. Sent only when it changes, without
        waiting; from another thread (a cancel) nothing is sent: the offer goes at close
        (``Waiter.retire``)."""
        link = self.link
        session, waiter = link.loop_claims(), link.waiter
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
        if slots and time.monotonic() < self._closed_until:
            return  # publishers read no offers now; asked again after GATE_RECHECK
        offer.slots, offer.queues = slots, queues if slots else ()
        offer.sent += 1
        answered = partial(self._answered, offer, offer.sent)
        session.register(address, channel.channel_id, offer.queues, slots, answered)

    def _answered(self, offer: Offer, sent: int, outcome: Any) -> None:
        if isinstance(outcome, self.link.store_errors()):
            return  # the claims in flight report the lost connection
        if isinstance(outcome, BaseException):
            logger.warning("alkstore: hand-off disabled on this connection: %r", outcome)
            self.enabled = False
        elif outcome is False:  # the store withdrew it: its gate is closed
            self._closed_until = time.monotonic() + GATE_RECHECK
            if sent == offer.sent:  # no later register changed what stands
                offer.slots, offer.queues = 0, ()

    def take(self, wake: Wakeup) -> set[str]:
        """Deliver the jobs publishers handed to this connection's channels, in the
        order they were handed; the rest go back. Returns the queues of those whose
        claims lapsed before they could be taken (to claim from again)."""
        if not wake.handoffs:
            return set()
        link = self.link
        by_id = {ch.channel_id: ch for ch in link.channels}
        orphans = []
        mine: dict[Any, list[Delivery]] = {}
        for chan, delivery in wake.handoffs:
            channel = by_id.get(chan)
            if channel is None:
                orphans.append(delivery)
            else:
                mine.setdefault(channel, []).append(delivery)
        link.hand_back(orphans)
        lapsed: set[str] = set()
        for channel, deliveries in mine.items():
            offer = self._offer(channel)
            offer.slots = max(offer.slots - len(deliveries), 0)
            if channel.claiming:  # the claim in flight was sized to every free slot
                link.hand_back(deliveries)
                continue
            # Read late? checked once for all of them; then the channel's one delivery
            # loop: held, so heartbeated while earlier ones run (inline pools); one the
            # channel can no longer take (closed, cancelled, full) is handed back.
            live, gone = still_claimed(link, deliveries, channel._no_ack_queues)
            lapsed |= gone
            channel.deliver(live)
        return lapsed
