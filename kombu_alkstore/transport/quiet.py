"""Quiet while busy: a consumer whose every task channel has a backlog stops hearing
the store's announcements of new jobs.

Every publish announces its job to every LISTENing consumer of the store (PostgreSQL's
NOTIFY reaches them all; none while no consumer hears, see ``unheard`` in the engine's
queries.sql), and each wakes its event loop for it. A busy one takes
nothing from it: it claims again as acks free its slots. With many busy workers that is
most of a publish's cost, paid by the server and by every worker (``benchmarks/
many_hosts.py``, "publish while busy").

So once every channel consuming with acks (the task channels) has had a backlog for
:data:`QUIET_AFTER` seconds, the connection stops hearing announcements
(:meth:`Waiter.hear_wakeups`). Its idle control channels (the pidbox, replies) still get
their messages: publishers hand them to their offers (hand-off, which this requires),
and a check every :data:`QUIET_POLL` seconds claims what no offer took. That check also
claims for every free slot of the task channels, which would otherwise wait for half
their slots to free (under long tasks, for long). Routing goes back to polling its
version while quiet (:class:`RoutingCache`).

Guarantee: no announcement is lost. As soon as a task channel's claim leaves no backlog,
the connection hears announcements again and then every channel claims once: a job
committed before LISTEN took effect is found by that claim, one committed after is
announced.
"""

from __future__ import annotations

import time
from typing import Any

from .handoff import Handoff
from .link import Link
from .scheduling import ClaimScheduler

#: Seconds every task channel must have had a backlog before announcements stop.
QUIET_AFTER = 1.0
#: While quiet: seconds between claims for free slots and checks for work no offer took.
QUIET_POLL = 1.0


class Quiet:
    """Whether one kombu connection hears the store's announcements (event loop only)."""

    def __init__(self, link: Link, scheduler: ClaimScheduler, handoff: Handoff) -> None:
        self.link = link
        self.scheduler = scheduler
        self.handoff = handoff
        #: Announcements stopped.
        self.active = False
        self._busy_since: float | None = None

    def reset(self) -> None:
        """A new waiter hears everything."""
        self.active = False
        self._busy_since = None

    @staticmethod
    def _tasks(channel: Any) -> bool:
        """Whether ``channel`` consumes a queue with acks (a task channel)."""
        return bool(channel._consumers) and bool(
            set(channel._active_queues) - channel._no_ack_queues
        )

    def _busy(self) -> bool:
        tasks = [ch for ch in self.link.channels if self._tasks(ch)]
        return bool(tasks) and all(ch in self.scheduler.starved for ch in tasks)

    def tick(self) -> None:
        """Every :data:`QUIET_POLL` seconds: go quiet after a long enough backlog; while
        quiet, claim for free slots and for what no offer took (:meth:`_poll_idle`), or
        hear again if no task channel is busy any more (a consumer cancelled, for one)."""
        link = self.link
        if link.waiter is None or link.claims is None:  # the connection was lost meanwhile
            return
        if self.active:
            if not self._busy():
                self.hear()
            else:
                self._poll_idle()
            return
        if not (self.handoff.enabled and self._busy()):
            self._busy_since = None
            return
        now = time.monotonic()
        if self._busy_since is None:
            self._busy_since = now
        elif now - self._busy_since >= QUIET_AFTER:
            self._quiet()

    def claimed(self, channel: Any, full: bool) -> None:
        """A claim of ``channel`` was answered; without a backlog left, hear again."""
        if full or not self._tasks(channel):
            return
        self._busy_since = None
        if self.active and self.link.waiter is not None:
            self.hear()

    def _quiet(self) -> None:
        link = self.link
        if not link.waiter.hear_wakeups(False):
            return
        self.active = True
        link.listening(False)
        self.scheduler.read_wakeups()  # what arrived during the round trip (hand-offs among it)

    def hear(self) -> None:
        """Hear announcements again, then claim once on every channel (see above)."""
        link = self.link
        self.reset()
        link.waiter.hear_wakeups(True)
        link.listening(True)
        self.scheduler.read_wakeups()
        self.scheduler.start()  # every channel claims, then the next due time is learnt

    def _poll_idle(self) -> None:
        """Claim for the slots no announcement will fill: each task channel with a free
        slot claims now (a busy channel waits for half its slots to free before it
        claims on its own, and a slot can stay free for long under long tasks); the idle
        channels look for work no offer took."""
        channels, scheduler = self.link.channels, self.scheduler
        scheduler.poll_all(channels=[ch for ch in channels if self._tasks(ch)])
        scheduler.poll_if_due(
            {
                q
                for ch in channels
                if ch._consumers and ch not in scheduler.starved
                for q in ch._active_queues
            }
        )
