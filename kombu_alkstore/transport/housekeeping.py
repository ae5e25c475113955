"""Housekeeping from a thread of its own: queues kept alive and maintenance rounds run
whatever the event loop is doing.

Every ``sweep_interval`` (or at once when woken) the :class:`Housekeeper` calls
``sweep()``: the maintenance round when this connection took the lease, on a pooled
connection; and, unless the event loop did it on its claims connection within the last
two intervals, the refresh of this connection's queues and the lease itself. So an idle
worker's loop keeps its two connections (LISTEN, claims), and:

- a solo worker running a long task (the task runs in the event loop's thread), or a
  gevent/eventlet worker whose greenlets do not yield, keeps its pidbox, gossip and
  Broadcast queues: nothing drops them as unused while it is alive;
- a slow round (one waiting on a row lock, or expiring 50,000 jobs) never travels on the
  claims connection, where it would hold back the heartbeats, claims and acks pipelined
  behind it until the claims lapse.

Where the process is monkey-patched the thread is a greenlet, as the heartbeat thread is.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from ..worker_thread import WorkerThread


class Housekeeper(WorkerThread):
    """Calls ``sweep()`` every ``interval`` seconds from its own thread, until stopped,
    and at once after :meth:`wake` (an event loop took the lease).

    A sweep that raises is logged (a warning naming the error, every time) and the next
    one runs on schedule: a round cancelled by ``statement_timeout`` never stops
    maintenance silently. :meth:`stop` lets a sweep under way finish first (up to 10 s).
    """

    name = "alkstore-housekeeping"
    join_timeout = 10.0

    def __init__(self, sweep: Callable[[], None], interval: float) -> None:
        super().__init__()
        # Weakly: the thread must not keep a transport nobody closed from being collected
        # (with its store, pools and LISTEN connection); it ends once the transport goes.
        self._sweep = weakref.WeakMethod(sweep)
        self._interval = interval

    def _run(self, stop: threading.Event) -> None:
        while not self._wait(stop, self._interval):
            sweep = self._sweep()
            if sweep is None:
                return
            try:
                sweep()
            except Exception as exc:
                self._failed(
                    "queue refresh or maintenance round",
                    exc,
                    f"the next round runs in {self._interval} s",
                )
            del sweep
