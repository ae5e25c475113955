"""One round of maintenance at a time across every worker of a store.

Each worker's transport calls :meth:`Maintenance.run` (or :meth:`Maintenance.send`, on a
claims session) every ``sweep_interval``. The round first takes or renews the lease
:data:`LEASE`; only its holder runs the jobs (:data:`~..store.base.MAINTENANCE_JOBS`, by
:meth:`Store.maintain_round`: one statement on PostgreSQL). A holder renews it each round;
when it dies the lease lapses after ``LEASE_ROUNDS`` intervals and the next worker's round
takes it. Every job is idempotent, so a round run twice (a lease lapsing mid-round) does
no harm.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from ..store import MaintenanceResult, Store

logger = logging.getLogger("kombu_alkstore")

#: The lease whose holder runs the maintenance jobs.
LEASE = "alkstore.maintenance"
#: The lease lasts this many intervals: a holder that missed one round keeps it.
LEASE_ROUNDS = 2.5

Done = Callable[[list[MaintenanceResult] | BaseException | None], None]


class Maintenance:
    """A worker's side of the maintenance lease."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.ttl = interval * LEASE_ROUNDS
        #: Unique per transport: two workers of one host are two holders.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: This owner took the lease at least once (only then is there one to release).
        self.held = False

    def run(self, store: Store) -> list[MaintenanceResult] | None:
        """One round, blocking: the jobs' results, or None when another worker holds the
        lease."""
        if not store.lease_acquire(LEASE, self.owner, self.ttl):
            return None
        self.held = True
        return report(store.maintain_round())

    def send(self, session: Any, done: Done) -> None:
        """One round on a claims session, without waiting: ``done`` gets the results,
        None (not the holder) or the exception."""

        def leased(held: bool | BaseException) -> None:
            if isinstance(held, BaseException) or not held:
                done(held if isinstance(held, BaseException) else None)
                return
            self.held = True

            def ran(results: list[MaintenanceResult] | BaseException) -> None:
                done(results if isinstance(results, BaseException) else report(results))

            session.maintain_round(ran)

        session.lease_acquire(LEASE, self.owner, self.ttl, leased)

    def release(self, store: Store) -> None:
        """Give the lease up (a clean close): the next worker's round takes it at once.
        A connection that never took it (a producer's) sends nothing."""
        if self.held:
            self.held = False
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
