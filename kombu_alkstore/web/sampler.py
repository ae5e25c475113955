"""The store's whole-table figures, read by one background thread, never by a request.

Counts over whole tables (``Store.counts``: a scan of ``jobs`` and ``dead``) are taken by
one background thread every ``refresh`` seconds into a :class:`Snapshot`, so a page load
or a Prometheus scrape never waits for them and their cost does not grow with traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..present.vacuum import vacuum_warnings
from ..store import QueueCounts, Store
from ..store.admin import ClaimStat, RatePoint
from ..store.health import VacuumHealth
from ..store.limits import QueueLimit

logger = logging.getLogger(__name__)

#: The sampler waits at least this many times its last read between two reads, so the
#: whole-table counts cost at most about 1/(1+LOAD_FACTOR) of one database core.
LOAD_FACTOR = 5.0


@dataclass
class Snapshot:
    """The store's whole-table figures at ``taken_at`` (see the module docstring)."""

    taken_at: float = 0.0
    took: float = 0.0
    counts: list[QueueCounts] = field(default_factory=list)
    paused: dict[str, float] = field(default_factory=dict)
    claims: list[ClaimStat] = field(default_factory=list)
    rates: list[RatePoint] = field(default_factory=list)
    totals: list[RatePoint] = field(default_factory=list)
    #: Each queue's concurrency limits and their use (docs/flow-control.md), by queue.
    limits: dict[str, QueueLimit] = field(default_factory=dict)
    #: What pins the xmin horizon (every open transaction) and the tables' dead rows.
    health: VacuumHealth = field(default_factory=lambda: VacuumHealth((), ()))
    error: str | None = None

    @property
    def vacuum_warnings(self) -> list[str]:
        """What ``status`` would warn about dead rows (see :mod:`..present.vacuum`)."""
        return vacuum_warnings(self.health)

    def queue(self, name: str) -> QueueCounts:
        """The counts of queue ``name`` (all zero when it has none)."""
        for c in self.counts:
            if c.queue == name:
                return c
        return QueueCounts(name)

    def queue_names(self) -> list[str]:
        """Every queue with messages or paused, by name."""
        names = {c.queue for c in self.counts} | set(self.paused)
        return sorted(names)


class Sampler:
    """Refreshes the :class:`Snapshot` every ``refresh`` seconds in a daemon thread (or
    :data:`LOAD_FACTOR` times as long as the last read took, when that is longer)."""

    def __init__(self, store: Store, refresh: float = 5.0) -> None:
        self.store = store
        self.refresh = refresh
        self.snapshot = Snapshot()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> Snapshot:
        """Read the whole-table figures now (eight statements) and keep them; when the
        store cannot be read, keep the last figures with ``error`` set."""
        start = time.time()
        try:
            snap = Snapshot(
                taken_at=start,
                counts=self.store.counts(),
                paused=self.store.paused_queues(),
                claims=self.store.claim_stats(),
                rates=self.store.rate_points(start // 60 * 60 - 3600),
                totals=self.store.rate_totals(),
                limits={q.queue: q for q in self.store.limits()},
                health=self.store.vacuum_health(older_than=0),
            )
            snap.took = time.time() - start
        except Exception as exc:  # the database is down: keep the last figures, say so
            logger.warning("dashboard: cannot read the store: %s", exc)
            snap = Snapshot(**{**self.snapshot.__dict__, "error": f"{type(exc).__name__}: {exc}"})
        self.snapshot = snap
        return snap

    def start(self) -> None:
        """Take a snapshot now, then keep refreshing in the background."""
        self.take()
        self._thread = threading.Thread(target=self._run, name="alkstore-web-sampler", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Refresh soon (after an action changed the figures)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(max(self.refresh, LOAD_FACTOR * self.snapshot.took))
            self._wake.clear()
            if not self._stop.is_set():
                self.take()

    def stop(self) -> None:
        """Stop refreshing (the thread ends at its next wake-up)."""
        self._stop.set()
        self._wake.set()
