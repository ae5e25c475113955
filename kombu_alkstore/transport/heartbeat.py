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
that connection when a beat is due (:meth:`Heartbeater.take_due`, from a timer every
``MAX_SLEEP``), so a busy worker holds no connection for heartbeats; the thread beats,
on a pooled connection, only when the loop is late by ``LOOP_GRACE`` (a task blocks it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

#: The longest the thread sleeps before looking again at what is held (a new job with a
#: short timeout may have arrived since).
MAX_SLEEP = 0.5
#: How far past due the thread lets a beat go while an event loop beats (at most half
#: the interval): later, the loop is taken as blocked and the thread beats.
LOOP_GRACE = 1.0


def beat_interval(configured: float, held: Iterable[Any]) -> float:
    """How often to beat for ``held`` deliveries: the configured interval, or a third of
    the shortest visibility timeout among them if that is sooner."""
    timeouts = [d.visibility_timeout for d in held if d.visibility_timeout]
    return min([configured, *(t / 3.0 for t in timeouts)])


class Heartbeater:
    """Calls ``beat()`` (which extends every held claim) whenever it is due.

    ``held()`` returns the deliveries held now; nothing is sent while it is empty. Started
    on the first held message, stopped when the connection closes or is lost.
    """

    def __init__(
        self, beat: Callable[[], None], held: Callable[[], list[Any]], configured: float
    ) -> None:
        self._beat = beat
        self._held = held
        self._configured = configured
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.last = time.monotonic()
        #: An event loop beats when due (see take_due): the thread beats only if it is late.
        self.loop_beats = False

    def ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self.last = time.monotonic()
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="alkstore-heartbeat", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """Stop the thread (a later held message starts a new one)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def due_in(self, grace: bool = False) -> float:
        """Seconds until the next beat is due for what is held now (0: due); with
        ``grace``, until the thread's turn (later while an event loop beats)."""
        held = self._held()
        if not held:
            return MAX_SLEEP
        interval = beat_interval(self._configured, held)
        late = min(LOOP_GRACE, interval / 2) if grace and self.loop_beats else 0.0
        return self.last + interval + late - time.monotonic()

    def take_due(self) -> bool:
        """For the event loop: True if a beat is due now, which the caller then sends."""
        if self.due_in() > 0:
            return False
        self.last = time.monotonic()
        return True

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.due_in(grace=True)
            if wait > 0:
                stop.wait(min(wait, MAX_SLEEP))
                continue
            self.last = time.monotonic()
            with contextlib.suppress(Exception):  # beat() logs; the claims lapse by themselves
                self._beat()
