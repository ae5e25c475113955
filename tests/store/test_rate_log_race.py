"""A rate counts only the jobs a claim took (PostgreSQL: a claim on a queue with a rate
picks its jobs in a function whose snapshot is taken after the queue's row lock, later
than the claim statement's; a job committed in between is seen by the pick). Found by
tests/flow/test_rates.py under load, 7 claims logged for 6 tasks (docs/reliability.md
44.1): the claim's UPDATE, with the statement's snapshot, did not see such a job, so it
was picked and logged but not claimed. Since migration 13 the claim logs the jobs it
took; since migration 16 its update runs in a function of its own (claim_rows, with its
own snapshot, later than the pick's), so such a job is claimed and counted once."""

from __future__ import annotations

import threading

import psycopg

import kombu_alkstore
from tests.conftest import PG_URL
from tests.helpers import wait_for


def _lock_queue_row(store, queue: str) -> psycopg.Connection:
    """A session holding ``queue``'s row lock (as a concurrent claim does), uncommitted."""
    conn = psycopg.connect(PG_URL)
    conn.execute(
        f"SELECT 1 FROM {store.names['queues']} WHERE name = %s FOR NO KEY UPDATE", [queue]
    )
    return conn


def _wait_for_lock_waiter(store, timeout: float = 10.0) -> None:
    """Until a claim of ``store`` waits for a lock (its query's head names the queues)."""
    head = f"WITH lim AS (SELECT lq.name FROM {store.names['queues']} lq%"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        wait_for(
            lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND query LIKE %s",
                [head],
            ).fetchone()[0],
            timeout,
            interval=0.01,
        )


def test_a_job_committed_while_a_claim_waits_is_not_counted_unclaimed(pg_target):
    """b is published (in the caller's transaction) before the claim begins and committed
    while the claim waits for the queue's lock: due, not in the claim statement's
    snapshot, but in the pick's and the update's."""
    with pg_target.open() as store, pg_target.open() as publisher:
        store.set_rate("q", "2/60s")
        store.enqueue("q", b"a")
        caller = psycopg.connect(PG_URL)
        with kombu_alkstore.transaction(caller):
            publisher.enqueue("q", b"b")
        holder = _lock_queue_row(store, "q")
        got: list = []
        claim = threading.Thread(target=lambda: got.extend(store.claim(["q"], 2)))
        try:
            claim.start()
            _wait_for_lock_waiter(store)
            caller.commit()
        finally:
            caller.close()
            holder.commit()
            holder.close()
            claim.join(10)
        assert [d.body for d in got] == [b"a", b"b"]  # both picked, both claimed
        assert len(store.claims_logged("q")) == 2  # ... each counted once
        assert store.claim(["q"], 2) == []  # the rate is full
        assert len(store.claims_logged("q")) == 2
