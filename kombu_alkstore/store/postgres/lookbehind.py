"""The claim floors' watch: the look behind the floors, off the claim session.

A claim starts at its queue's floors (``floors.py``); what lands behind a floor without
an announcement heard (a claim of another worker rolled back, a notification missed) is
found by a walk from the head of the floor's priority, over every dead index entry a
pinned xmin horizon keeps there. Done as a periodic full claim on the claim session,
that walk (hundreds of milliseconds after half an hour behind a pin at 500 jobs/s) held
up every claim, ack and heartbeat pipelined behind it. :class:`FloorWatch` does it from
a thread of its own, on a pooled connection, every ``claim_floor_rescan`` / 2 seconds,
while the claims from the head are slow: it holds one more connection per busy worker
process, which a worker whose claims are quick does not pay.

Guarantees:

* A job due behind a floor when a look starts, of a queue claimed since the last look,
  is announced by it (``look_behind`` in queries.sql: every waiter lowers its floors
  below it) and this process's floors go below it, heard or not. A queue not claimed
  meanwhile is not looked at: its next claim or due check after ``claim_floor_rescan``
  walks from the head (``ClaimFloors.behind``).
* A look that fails is logged and notes nothing: the queue's claims walk from the head
  once ``claim_floor_rescan`` has passed, as without a watch.
* One thread per store and process. With the store option ``claim_floor_watch`` (on by
  default) it starts once two claims from the head in a row on a claim session each
  took ``claim_floor_watch_after`` seconds (``ClaimFloors.walked``: behind a pinned
  horizon they grow with every job done), or with the first claim session where that is
  0. It stops after a look that took less than half of that, or had nothing to look at
  (``ClaimFloors.calm``: the horizon moved on, VACUUM removed the dead entries, the
  worker went idle), and when the store closes; a forked child starts its own.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from ...worker_thread import WorkerThread, logger

if TYPE_CHECKING:
    from .store import PostgresStore


def look_behind(store: PostgresStore) -> list[tuple[str, float]] | None:
    """One look behind ``store``'s floors in this process: the (queue, run_at) of the
    first due job found behind each floor, announced, and the floors lowered below;
    None when there was nothing to look behind (no floor of a queue claimed since)."""
    behind = store.floors.behind()
    if behind is None:
        return None
    params, at = behind
    found = [(r["queue"], r["run_at"]) for r in store._all("look_behind", params)]
    store.floors.looked(params, at, found)
    return found


class FloorWatch(WorkerThread):
    """Calls :func:`look_behind` every ``interval`` seconds from its own thread."""

    name = "alkstore-floor-watch"

    def __init__(self, store: PostgresStore, interval: float) -> None:
        super().__init__()
        # Weakly: the thread must not keep a store nobody closed from being collected.
        self._store = weakref.ref(store)
        self._interval = interval
        self._pid = os.getpid()

    def ensure_started(self) -> None:
        if self._pid != os.getpid():  # the parent's thread did not come with the fork
            self._pid, self._thread = os.getpid(), None
        super().ensure_started()

    def _starting(self) -> None:
        # What an operator can see of it, beside its connection: behind a pinned horizon
        # this is one of the first signs in a worker's log.
        store = self._store()
        why = (
            "claims from the head have grown slow (dead rows a pinned xmin horizon keeps?)"
            if store is None or store.floors.watch_after
            else "claim_floor_watch_after is 0"
        )
        logger.info(
            "alkstore: looking behind the claim floors from a thread (pid %d): %s",
            os.getpid(),
            why,
        )

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            store = self._store()
            if store is None or store.closed:
                return
            started = time.monotonic()
            try:
                looked = look_behind(store)
                took = None if looked is None else time.monotonic() - started
                calm = store.floors.calm(took)
            except Exception as exc:
                self._failed(
                    "the look behind the claim floors",
                    exc,
                    "claims walk from the head until one succeeds",
                )
                calm = False
            del store
            if calm:
                logger.info(
                    "alkstore: stopped looking behind the claim floors from a thread: "
                    "the look was quick, or the worker idle (pid %d)",
                    os.getpid(),
                )
                self.stop()  # claims walk from the head again; slow ones start it anew
                return
