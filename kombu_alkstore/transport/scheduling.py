"""What a connection claims, and when: wake-ups, due times, the safety poll, backlogs.

The transport hands every reason to claim to one :class:`ClaimScheduler`: a wake-up
from the waiter (:meth:`ClaimScheduler.read_wakeups`), a delayed job falling due (its
due time learnt from the store, then a loop timer), the slow safety-net poll, and the
channels left with a backlog (a full batch, or no free slot: claimed again on the loop's
tick as acks free slots). It sends each claim and takes its answer, then the channel
delivers (:meth:`Channel.deliver`). Quiet mode drives it through its public methods; it
tells hand-off and quiet mode of each answered claim (``answered``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..store import Delivery, Wakeup
from .handoff import Handoff
from .late import still_claimed
from .link import Link

logger = logging.getLogger("kombu_alkstore")


class ClaimScheduler:
    """Claim scheduling for one transport (a kombu connection): every method runs in
    the thread that drives the connection (the event loop's, or ``drain_events``'s);
    :meth:`active_queues` is safe from any thread.

    Guarantees: one claim in flight per channel, sized to its free prefetch slots (its
    hand-off offer withdrawn first); a claimed job whose consumer went away while the
    claim was in flight is handed back, its attempt refunded; a claim that lapsed before
    it could be delivered is dropped, and its queue claimed from again."""

    def __init__(self, link: Link, handoff: Handoff) -> None:
        self.link = link
        self.handoff = handoff
        #: Told of each claim answered, after its batch is delivered: ``fn(channel, full)``
        #: (hand-off and quiet mode).
        self.answered: list[Callable[[Any, bool], None]] = [handoff.claimed]
        #: Channels that may have work left behind (a full batch, or no free slot).
        self.starved: set[Any] = set()
        #: The earliest future due time known (database clock), or None.
        self.next_at: float | None = None
        #: A due time was skipped while claims were in flight: learn it once answered.
        self._relearn = False
        #: ``drain_events`` learnt the first due time already.
        self.learned = False

    def start(self) -> None:
        """Every channel claims once, then the next due time is learnt."""
        self.poll_all()
        self.learn_next_due()

    def read_wakeups(self, *args: Any) -> bool:
        """Read the waiter: deliver what publishers handed over, then claim for what
        was announced; True if anything was."""
        wake = self.link.open_waiter().poll()
        lapsed = self.handoff.take(wake)
        if wake.routing:
            self.link.routing.invalidate()
        self.woken(wake)
        if lapsed:
            self.poll_if_due(lapsed)
        return bool(wake)

    def woken(self, wake: Wakeup) -> None:
        """Claim for what a wake-up announced (its hand-offs, if any, taken already)."""
        if wake.next_at is not None:
            self.schedule_at(wake.next_at)
        if wake.any:
            self.poll_all()
        elif wake.queues:
            self.poll_all(only=wake.queues)
        if wake and not self.link.store.capabilities.listener:
            self.learn_next_due()

    def claim_starved(self) -> None:
        """Each loop tick: a channel left with a backlog claims again once acks freed
        half its slots."""
        if self.starved:
            self.poll_all(batch=True, channels=list(self.starved))

    # ------------------------------------------------------------ due times
    def learn_next_due(self) -> None:
        """Ask the store when the next delayed job of our queues is due."""
        queues = sorted(self.active_queues())
        claims = self.link.claims_here()
        if queues and claims is not None:
            claims.next_due(queues, self._next_due_answered)

    def _next_due_answered(self, when: float | None | BaseException) -> None:
        link = self.link
        if not link.usable(when) or when is None:
            return
        if when <= link.db_now():
            if self.starved or any(ch.claiming for ch in link.channels):
                # A backlog: claims resume as slots free (see claim_starved). Or a claim
                # in flight, which may take this job: ask again once it is answered (see
                # _batch_done), or later due times wait for the safety-net poll.
                self._relearn = True
                return
            when = link.db_now() + 0.005  # it fell due while we claimed: look again
        self.schedule_at(when)

    def remember_next_at(self, when: float) -> bool:
        """Keep the earliest future due time; True if ``when`` became it."""
        if self.next_at is not None and self.link.db_now() < self.next_at <= when:
            return False
        self.next_at = when
        return True

    def schedule_at(self, when: float) -> None:
        """Claim at ``when`` (database clock), unless an earlier claim is set."""
        link = self.link
        if self.remember_next_at(when) and link.loop is not None:
            delay = max(when - link.db_now(), 0) + 0.001
            link.loop.call_later(delay, link.guarded(self._poll_due))

    def _poll_due(self) -> None:
        """A delayed job fell due: claim it, then learn when the next one is due."""
        self.next_at = None
        self.poll_all()
        self.learn_next_due()

    # ------------------------------------------------------------ polls
    def safety_poll(self) -> None:
        """The slow re-poll behind the wake-ups: finds lapsed claims (which announce
        nothing) and anything a lost notification missed, with one read when idle."""
        self.poll_if_due(self.active_queues())

    def poll_if_due(self, queues: set[str]) -> None:
        """Claim on every channel if one of ``queues`` has due work (one read first)."""
        names = sorted(queues)
        claims = self.link.claims_here()
        if names and claims is not None:
            claims.has_due(names, self._due_answered)

    def _due_answered(self, due: bool | BaseException) -> None:
        if self.link.usable(due) and due:
            self.poll_all()

    def active_queues(self) -> set[str]:
        """The queues this connection's channels consume (safe from another thread)."""
        for _ in range(5):
            try:
                return {q for ch in list(self.link.channels) for q in list(ch._active_queues)}
            except RuntimeError:  # a channel's set changed while read: read again
                continue
        return set()

    def poll_all(
        self,
        batch: bool = False,
        channels: list[Any] | None = None,
        only: set[str] | None = None,
        at_most: int | None = None,
    ) -> bool:
        """Claim and deliver one batch on each consuming channel; True if any delivered.

        ``channels`` limits the channels, ``only`` to those consuming one of these
        queues (the ones a wake-up named). With ``batch``, a channel claims only once
        half its prefetch slots are free. With ``at_most`` (no event loop, no claims
        session), the first channel that claims anything delivers that many and keeps
        the rest (``Channel.deliver_undelivered``); the others do not claim.
        """
        link = self.link
        delivered = False
        chosen = channels if channels is not None else list(link.channels)
        # Control channels (no-ack consumers: the pidbox, replies) first: a revoke that
        # waits beside the task it names reaches the worker before that task does.
        chosen.sort(key=lambda ch: not ch._no_ack_queues)
        for channel in chosen:
            if not channel._consumers:
                self.starved.discard(channel)
                continue
            if only and not only.intersection(channel._active_queues):
                continue  # not named by the wake-up: a backlog it has is still there
            if not channel.qos.can_consume() or (batch and not channel.wants_batch()):
                self.starved.add(channel)
                if not batch:  # woken for due work (or the safety poll found some)
                    self.handoff.behind(channel)
                continue
            self.starved.discard(channel)
            if link.claims is not None:
                self.request_claim(channel, link.claims)
            elif self.claim_now(channel, at_most):
                delivered = True
                if at_most is not None:
                    break
        return delivered

    # ------------------------------------------------------------ one claim
    def request_claim(self, channel: Any, claims: Any) -> None:
        """Send one claim for ``channel`` (sized by its QoS) without waiting; it delivers
        when the claim is answered. One claim at a time per channel, so the batch never
        exceeds the free slots."""
        if channel.claiming:
            # The job that woke us may have committed after the claim in flight looked.
            channel.claim_again = True
            return
        if not channel._active_queues:
            return
        self.handoff.before_claim(channel)
        limit = channel.batch_size()
        channel.claiming = True
        try:
            claims.claim(
                channel._active_queues,
                limit,
                lambda got, more: self._claimed(channel, got, more, limit),
            )
        except BaseException:
            channel.claiming = False
            raise

    def _claimed(
        self, channel: Any, got: list[Delivery] | BaseException, more: bool, limit: int
    ) -> None:
        channel.claiming = False
        again, channel.claim_again = channel.claim_again, False
        if isinstance(got, BaseException):
            raise got
        if channel.connection is None:  # answered after the channel closed: hand them back
            channel.hand_back(got)
            return
        # The consumer may have gone while the claim was in flight: hand those back.
        consumed = set() if channel.closed else set(channel._active_queues)
        gone = [d for d in got if d.queue not in consumed]
        if gone:
            self.link.hand_back(gone)
        full = more or again or len(got) >= limit
        self._batch_done(channel, full)
        if len(gone) < len(got):
            self.deliver(channel, [d for d in got if d.queue in consumed])
        for fn in self.answered:  # after the batch is in the QoS
            fn(channel, full)

    def claim_now(self, channel: Any, at_most: int | None = None) -> bool:
        """Claim one batch for ``channel`` on the store, blocking (no claims session), and
        deliver it: all, or ``at_most`` with the rest kept (``deliver_undelivered``).
        True if anything was claimed."""
        limit = channel.batch_size()
        got = self.link.store.claim(list(dict.fromkeys(channel._active_queues)), limit)
        if not got:
            return False
        self._batch_done(channel, len(got) >= limit)
        self.deliver(channel, got, at_most)
        return True

    def deliver(self, channel: Any, deliveries: list[Delivery], at_most: int | None = None) -> None:
        """Hand ``channel`` its claimed jobs, those whose claims lapsed meanwhile dropped
        (their queues claimed from again)."""
        live, lapsed = still_claimed(self.link, deliveries, channel._no_ack_queues)
        channel.deliver(live, at_most)
        if lapsed:
            self.poll_if_due(lapsed)

    def _batch_done(self, channel: Any, full: bool) -> None:
        """After each claim of ``channel``: a full batch leaves work behind."""
        if full:
            self.starved.add(channel)
        else:
            self.starved.discard(channel)
        if self._relearn and not self.starved and not any(c.claiming for c in self.link.channels):
            self._relearn = False
            self.learn_next_due()
