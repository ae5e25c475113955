"""One round of maintenance at a time across every worker of a store.

Each worker's transport takes the lease every ``sweep_interval`` (in an event loop on its
claims connection, else from its housekeeping thread); the holder's round runs on a pooled
connection from the housekeeping thread (:meth:`Maintenance.round`), never on the claims
connection, whose heartbeats a slow round would hold back. The round first takes or renews the lease
:data:`LEASE`; only its holder runs the jobs (:data:`~..store.values.MAINTENANCE_JOBS`, by
:meth:`Store.maintain_round`: one statement on PostgreSQL). A holder renews it each round;
when it dies the lease lapses after ``LEASE_ROUNDS`` intervals and the next worker's round
takes it. Every job is idempotent, so a round run twice (a lease lapsing mid-round) does
no harm.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from ..store import MaintenanceResult, Store

logger = logging.getLogger("kombu_alkstore")

#: The lease whose holder runs the maintenance jobs.
LEASE = "alkstore.maintenance"
#: The lease lasts this many intervals: a holder that missed one round keeps it.
LEASE_ROUNDS = 2.5
#: Seconds between two deletions of expired Celery results by the lease holder.
RESULTS_INTERVAL = 300.0


class Maintenance:
    """A worker's side of the maintenance lease."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.ttl = interval * LEASE_ROUNDS
        #: Unique per transport: two workers of one host are two holders.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: This owner took the lease at least once (only then is there one to release).
        self.held = False
        #: Until when (monotonic clock) the lease it last took or renewed lasts.
        self._holds_until = 0.0
        #: When the holder next deletes expired results (monotonic clock).
        self._results_due = 0.0

    def run(self, store: Store) -> list[MaintenanceResult] | None:
        """One round, blocking: the jobs' results, or None when another worker holds the
        lease."""
        asked = time.monotonic()
        if not store.lease_acquire(LEASE, self.owner, self.ttl):
            return None
        self.took(asked)
        return self.round(store)

    def took(self, asked: float) -> None:
        """The lease was taken or renewed by a request sent at ``asked`` (monotonic)."""
        self.held = True
        self._holds_until = asked + self.ttl

    @property
    def holds(self) -> bool:
        """This owner holds the lease now, as far as it knows (it took or renewed it
        less than its time to live ago, measured from when it asked)."""
        return time.monotonic() < self._holds_until

    def round(self, store: Store) -> list[MaintenanceResult]:
        """The jobs, blocking, for a caller that holds the lease (an event loop took it on
        its claims connection and left the round, which may be slow, to a pooled one)."""
        done = report(store.maintain_until_done(self.ttl / 2))
        self._expire_results(store)
        if store.refresh_statistics():  # last: an ANALYZE that fails holds up nothing
            logger.info("alkstore maintenance: planner statistics of jobs gathered anew")
        return done

    def _expire_results(self, store: Store) -> None:
        """The result backend's expired results and chords (kombu_alkstore.results),
        deleted by the holder at most every :data:`RESULTS_INTERVAL` (reads never return
        them meanwhile): one statement on PostgreSQL."""
        now = time.monotonic()
        if now < self._results_due:
            return
        self._results_due = now + RESULTS_INTERVAL
        gone = store.results().cleanup()
        if gone.results or gone.chords:
            logger.info("alkstore maintenance: results %d, chords %d", gone.results, gone.chords)
        # Operators' acts past the acts_retention option (the only delete the acts
        # table admits, store/acts.py).
        trimmed = store.trim_acts(batch=store.options.maintenance_batch)
        if trimmed:
            logger.info("alkstore maintenance: acts past retention %d", trimmed)

    def release(self, store: Store) -> None:
        """Give the lease up (a clean close): the next worker's round takes it at once.
        A connection that never took it (a producer's) sends nothing."""
        if self.held:
            self.held = False
            self._holds_until = 0.0
            store.lease_release(LEASE, self.owner)


def report(results: list[MaintenanceResult]) -> list[MaintenanceResult]:
    """Log what a round did (nothing when it did nothing); return the results."""
    did = [r for r in results if r.count or r.dropped or r.queues]
    if did:
        logger.info("alkstore maintenance: %s", ", ".join(map(_describe, did)))
    return results


def _describe(r: MaintenanceResult) -> str:
    parts = [f"{r.job} {r.count}"]
    if r.dropped:
        parts.append(f"dropped {r.dropped}")
    if r.queues:
        parts.append(f"queues {', '.join(r.queues)}")
    return " ".join(parts)
