"""Heartbeats from a thread of their own: claims held while the event loop is busy.

Celery's solo pool runs each task in the event loop's thread, and the gevent and eventlet
pools run tasks as greenlets of that loop; a timer in the loop would not fire while a task
runs, so a task longer than the visibility timeout would lose its claim and run again. The
:class:`Heartbeater` extends every claim a connection holds from its own thread (a
greenlet where the process is monkey-patched, which runs whenever a task yields).

Each job is extended by its own visibility timeout, as stamped by its publisher, at
least every third of the shortest one held: a producer configured with a shorter timeout
than the worker's cannot make its jobs lapse between beats.

Where an event loop with a claims connection runs (prefork, threads), the loop beats on
that connection when a beat is due (:meth:`Heartbeater.loop_beat`, from a timer every
``MAX_SLEEP``), so a busy worker holds no connection for heartbeats; the thread beats,
on a pooled connection, only when the loop is late by ``LOOP_GRACE`` (a task blocks it).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..worker_thread import WorkerThread
from .held import after_lapse, tag_of
from .link import Link

logger = logging.getLogger("kombu_alkstore")

#: The longest the thread sleeps before looking again at what is held (a new job with a
#: short timeout may have arrived since).
MAX_SLEEP = 0.5
#: How far past due the thread lets a beat go while an event loop beats (at most half
#: the interval): later, the loop is taken as blocked and the thread beats.
LOOP_GRACE = 1.0
#: The event loop looks every MAX_SLEEP and beats at the look closest to due, up to half
#: a look early: a loop on time then beats at most a quarter interval late at 1 s
#: intervals, before the thread's grace (half an interval) ends.
LOOP_LEAD = MAX_SLEEP / 2


def beat_interval(configured: float, held: Iterable[Any]) -> float:
    """How often to beat for ``held`` deliveries: the configured interval, or a third of
    the shortest visibility timeout among them if that is sooner."""
    timeouts = [d.visibility_timeout for d in held if d.visibility_timeout]
    return min([configured, *(t / 3.0 for t in timeouts)])


class Heartbeater(WorkerThread):
    """Extends every claim one connection holds whenever a beat is due, each by its own
    visibility timeout, in one statement.

    What is held: the messages held unacked (``held``, by delivery tag) and those Celery
    acked whose ack is not sent yet (``acks.waiting()``); nothing is sent while there is
    none. Started on the first held message, stopped when the connection closes or is
    lost (a later held message starts a new one). A claim a beat finds lapsed is dropped
    from ``held`` (its ack will be refused) and logged.
    """

    name = "alkstore-heartbeat"

    def __init__(self, link: Link, held: dict[str, Any], acks: Any, configured: float) -> None:
        super().__init__()
        self.link = link
        self.held = held
        self.acks = acks
        self._configured = configured
        self.last = time.monotonic()
        #: An event loop beats when due (see loop_beat): the thread beats only if it is late.
        self.loop_beats = False

    def _starting(self) -> None:
        self.last = time.monotonic()

    def claims_held(self) -> list[Any]:
        """The claims heartbeats keep: the messages held unacked, and those Celery acked
        whose ack is not sent yet (an inline pool can block the loop, and so the flush,
        for as long as its next task runs)."""
        return list(self.held.values()) + self.acks.waiting()

    def due_in(self, grace: bool = False) -> float:
        """Seconds until the next beat is due for what is held now (0: due); with
        ``grace``, until the thread's turn (later while an event loop beats)."""
        held = self.claims_held()
        if not held:
            return MAX_SLEEP
        interval = beat_interval(self._configured, held)
        late = min(LOOP_GRACE, interval / 2) if grace and self.loop_beats else 0.0
        return self.last + interval + late - time.monotonic()

    def take_due(self) -> bool:
        """True if a beat is due by the event loop's look now (``LOOP_LEAD`` early at
        most: the next look is ``MAX_SLEEP`` away), which the caller then sends."""
        if self.due_in() > LOOP_LEAD:
            return False
        self.last = time.monotonic()
        return True

    def beat(self) -> None:
        """Extend every held claim now (the thread's beat; safe from any thread)."""
        held = self.claims_held()
        claims = self.link.claims_here()
        if not held or claims is None or self.link.lost:
            return
        try:
            claims.heartbeat(held, functools.partial(self._answered, held))
        except Exception as exc:
            self._answered(held, exc)

    def loop_beat(self) -> None:
        """The beat from the event loop, on the claims connection, when it is due
        (never while nothing is held: see take_due)."""
        link = self.link
        if link.claims is not None and not link.lost and self.take_due():
            held = self.claims_held()
            link.claims.heartbeat(held, functools.partial(self._answered, held))

    def _answered(self, held: list[Any], alive: set[int] | BaseException) -> None:
        if isinstance(alive, BaseException):
            logger.warning(
                "alkstore: heartbeat failed (%r); the claims hold until their "
                "deadlines and the next beat retries",
                alive,
            )
            return
        for d in held:
            if d.id not in alive and self.held.pop(tag_of(d), None) is not None:
                logger.warning(
                    "alkstore: lost the claim on message %s on %r (its visibility timeout "
                    "of %s s lapsed); %s, and this ack will be refused",
                    d.id,
                    d.queue,
                    d.visibility_timeout,
                    after_lapse(d),
                )

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.due_in(grace=True)
            if wait > 0:
                stop.wait(min(wait, MAX_SLEEP))
                continue
            self.last = time.monotonic()
            with contextlib.suppress(Exception):  # beat() logs; the claims lapse by themselves
                self.beat()
