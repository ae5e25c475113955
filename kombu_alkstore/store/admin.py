"""Value types of the store's dashboard reads, and the per-process rate tally.

The dashboard (``kombu_alkstore.web``) reads the store only through :class:`Store`
methods returning these types (:mod:`.reads`); the SQL behind them is named statements
in each engine's ``queries.sql``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: The ``rates`` row of a queue whose counts never expire (the Prometheus counters).
TOTAL_MINUTE = 0.0


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead letters a search, a count or a bulk action covers (all given parts).

    ``task`` is the exact Celery task name (found in the message headers), ``error`` a
    case-insensitive substring of the last error, ``since``/``until`` epoch seconds of
    ``died_at`` (``until`` excluded).
    """

    queue: str | None = None
    task: str | None = None
    error: str | None = None
    since: float | None = None
    until: float | None = None

    def params(self) -> dict[str, Any]:
        """Bound parameters of the filter (the engines' ``dead_where`` SQL)."""
        task1 = task2 = None
        if self.task:
            name = json.dumps(self.task)  # as it appears in the JSON envelope's headers
            task1 = f'"task": {name}'.encode()
            task2 = f'"task":{name}'.encode()
        return {
            "queue": self.queue or None,
            "task1": task1,
            "task2": task2,
            "error": self.error or None,
            "since": self.since,
            "until": self.until,
        }


#: Every dead letter.
ANY_DEAD = DeadFilter()


@dataclass(frozen=True, slots=True)
class ClaimStat:
    """Claims held on one queue: how many, the oldest claimed message's publish time, the
    earliest deadline, and idle consumers' hand-off offers (PostgreSQL)."""

    queue: str
    processing: int
    oldest_created: float | None
    next_deadline: float | None
    offers: int
    offered_slots: int


@dataclass(frozen=True, slots=True)
class RatePoint:
    """Messages published to and acked from ``queue`` in the minute starting at ``minute``
    (``minute == 0``: the totals since the table was created)."""

    queue: str
    minute: float
    published: int
    acked: int


#: Every tally of this process: a forked child starts its own counts and thread.
_TALLIES: weakref.WeakSet[RateTally] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tally in list(_TALLIES):
        tally._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _flush_at_exit() -> None:
    """A process that exits without closing its connections (a script that publishes and
    returns) still writes its counts; only a killed one loses the last interval's."""
    for tally in list(_TALLIES):
        tally.flush()


class RateTally:
    """Publishes and acks counted per queue and minute in this process (a dict update per
    message), written to the ``rates`` table by a daemon thread every ``interval`` seconds
    (one statement per flush, none while nothing happens) and at close.

    Written at exit too (``atexit``): counts of the last interval are lost only if the
    process is killed; counts of a publish inside a caller's transaction are kept even if
    it rolls back.
    """

    interval = 5.0
    #: Per-minute rows older than this are deleted (at most every ``trim_every`` seconds).
    keep = 2 * 86400.0
    trim_every = 600.0

    def __init__(self, write: Callable[[list[RatePoint]], None], trim: Callable[[float], int]):
        self._write = weakref.WeakMethod(write)  # type: ignore[arg-type]
        self._trim = weakref.WeakMethod(trim)  # type: ignore[arg-type]
        self._reset()
        _TALLIES.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, float], list[int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trimmed = 0.0
        #: Another writer flushes (see :meth:`hand_over`); the thread only waits.
        self._handed_over = False

    def published(self, queues: Sequence[str]) -> None:
        """Count one publish per entry of ``queues`` (queue names)."""
        if len(queues) == 1:
            self._add(queues[0], 1, 0)
        elif queues:
            for q, n in Counter(queues).items():
                self._add(q, n, 0)

    def acked(self, deliveries: Sequence[Any], landed: set[int]) -> None:
        """Count the acks that landed (``landed``: ids) of ``deliveries``."""
        if not landed:
            return
        if len(deliveries) == 1:  # the worker's usual single ack: no counting loop
            self._add(deliveries[0].queue, 1, 1)
            return
        counts: dict[str, int] = {}
        for d in deliveries:
            if d.id in landed:
                counts[d.queue] = counts.get(d.queue, 0) + 1
        for q, n in counts.items():
            self._add(q, n, 1)

    def _add(self, queue: str, n: int, col: int) -> None:
        key = (queue, time.time() // 60 * 60)
        with self._lock:
            c = self._counts.get(key)
            if c is None:
                c = self._counts[key] = [0, 0]
            c[col] += n
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="alkstore-rates", daemon=True
                )
                self._thread.start()

    def take(self) -> tuple[list[RatePoint], float | None]:
        """What was counted since the last flush, and the cutoff of the per-minute rows to
        trim now (None: not due), for a writer that flushes itself (:meth:`hand_over`)."""
        with self._lock:
            rows = [RatePoint(q, m, c[0], c[1]) for (q, m), c in self._counts.items()]
            self._counts.clear()
        now = time.time()
        if not rows or now - self._trimmed <= self.trim_every:
            return rows, None
        self._trimmed = now
        return rows, now - self.keep

    def hand_over(self, handed: bool) -> None:
        """While ``handed``, another writer calls :meth:`take` every :attr:`interval` and
        writes the rows (a worker, on the connection its event loop already has); the
        thread writes nothing. Handed back, the thread writes what is left."""
        self._handed_over = handed

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._handed_over:
                self.flush()

    def flush(self) -> None:
        """Write what was counted since the last flush (one statement)."""
        rows, trim_before = self.take()
        write, trim = self._write(), self._trim()
        if write is None or trim is None:
            return
        try:
            if rows:
                write(rows)
            if trim_before is not None:
                trim(trim_before)
        except Exception as exc:  # counting must never break the caller
            logger.debug("alkstore: rate counts not written: %s", exc)

    def close(self) -> None:
        """Flush and stop the thread (the store is closing)."""
        self._stop.set()
        self.flush()
