"""The rotation of ``jobs``' generations, from a thread of the maintenance lease holder.

A rotation must come about once a second (each generation is the oldest, the one it
empties, for two seconds), far more often than the maintenance round (``sweep_interval``,
up to a minute), so it has a thread of its own, started by the holder's first round. It
rotates only while this transport holds the lease; when a rotation finds every
generation empty (an idle store) it waits twice as long each time, up to
:data:`IDLE_WAIT` (or the round's interval, if shorter), so an idle holder sends one
cheap statement every 16 s for it. A wake-up of the holder's loop (a publish announced
or handed off) nudges it out of such a wait, so rotations resume with the traffic; a
holder that consumes none of the busy queues resumes them within 16 s. A rotation that
fails is logged and the next one waits twice as long (store/generations.py: nothing is
lost either way). The transport's rotation also checks the hand-off's gate every
:data:`HANDOFF_CHECK` seconds and VACUUMs the offers table past it
(``Store.reopen_handoff``), so the hand-off a pin closed resumes within seconds of its end.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

from ..store import Rotation
from ..worker_thread import WorkerThread

logger = logging.getLogger("kombu_alkstore")

#: Seconds between two rotations while the store has rows (half a generation's period).
ROTATION_INTERVAL = 1.0
#: The longest wait between two rotations of an idle store (or one after a failure).
IDLE_WAIT = 16.0
#: Seconds between two checks of the hand-off's gate by the rotation's caller (the
#: transport): after a pin, the hand-off resumes within about this long.
HANDOFF_CHECK = 5.0


class Rotator(WorkerThread):
    """Calls ``rotate()`` every :data:`ROTATION_INTERVAL` seconds, backing off to
    ``longest`` (at most :data:`IDLE_WAIT`) while it returns an idle rotation, or None
    (the lease is not held)."""

    name = "alkstore-rotation"

    def __init__(self, rotate: Callable[[], Rotation | None], longest: float) -> None:
        super().__init__()
        # Weakly, as the housekeeping thread holds its sweep: a transport nobody closed
        # is collected, and the thread ends with it.
        self._rotate = weakref.WeakMethod(rotate)
        self._longest = max(min(longest, IDLE_WAIT), ROTATION_INTERVAL)
        #: The thread waits longer than ROTATION_INTERVAL (an idle store, or a failure).
        self._backed_off = False

    def nudge(self) -> None:
        """Jobs are flowing: a rotation waiting out an idle store comes now. Cheap enough
        for every wake-up of the event loop (an attribute read while not backed off)."""
        if self._backed_off:
            self._backed_off = False
            self.wake()

    def _starting(self) -> None:
        self._backed_off = False

    def _run(self, stop: threading.Event) -> None:
        wait = ROTATION_INTERVAL
        while True:
            self._backed_off = wait > ROTATION_INTERVAL
            if self._wait(stop, wait):
                return
            rotate = self._rotate()
            if rotate is None:
                return
            try:
                done = rotate()
            except Exception as exc:  # a lost database: each failure waits twice as long
                wait = min(wait * 2, self._longest)
                self._failed("rotation of jobs' generations", exc, f"the next in {wait:g} s")
                continue
            finally:
                del rotate
            if done is None or done.idle:
                wait = min(wait * 2, self._longest)
            else:
                wait = ROTATION_INTERVAL
                if done.outcome == "rotated":
                    logger.debug("alkstore: generation rotated, %d live rows moved", done.moved)
