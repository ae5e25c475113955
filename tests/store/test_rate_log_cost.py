"""A rated claim's reads do not grow with the claims its windows hold (migration 14,
docs/flow-control.md "How it is enforced"): the rates' log numbers its rows (claim_log.n
per queue, kn per key), so a window's use is its last ordinal less its first, two index
probes, where a count of the window's rows read every one of them (a queue at
1000000/s: ~3,900 rows per claim).

Counted, not timed, with 1,000 and with 6,000 claims within a queue-wide and a per-key
window: on a real PostgreSQL (its own schema), the blocks the store's own
``limited_picks`` reads from the log and its indexes (14 and 14; 36 and 160 with the
count), from the transaction's own statistics, rolled back; on a SQLite file, the
virtual machine instructions of the store's own statements around a rated claim (the
pick, the trim and the throttle check; rolled back).
"""

from __future__ import annotations

import psycopg

from kombu_alkstore.store import NewJob
from tests.helpers import blocks_read, sqlite_steps
from tests.store.conformance.helpers import keyed_body


def log_blocks(conn: psycopg.Connection, schema: str, queue: str) -> int:
    """Blocks one rated pick of 10 from ``queue`` reads from the rates' log and its
    indexes (rolled back), the second of two: the first also plans the function. The
    log's alone, so that what the jobs' index holds (dead entries that other sessions'
    snapshots keep) does not count."""
    sql = (
        f'SELECT * FROM "{schema}".limited_picks(%s, 10, '
        "extract(epoch FROM clock_timestamp()), 100)"
    )
    for _ in range(2):
        blocks = blocks_read(conn, f'"{schema}".claim_log', sql, ([queue],))
    return blocks


RATED = ("claim_pick_limited", "rate_trim", "rate_wait_set")


def rated(store) -> None:
    """Queue q at a rate that never throttles, and 7,500 jobs: more due than a limited
    claim looks at (limit_scan) at every point measured."""
    store.set_rate("q", "1000000/h")  # never throttles: every claim stays in the window
    store.set_rate("q", "1000000/h", key="*")
    store.enqueue_many([NewJob("q", keyed_body("k", n)) for n in range(7_500)])


def claim_jobs(store, count: int) -> None:
    for _ in range(count // 10):
        assert len(store.claim(["q"], 10)) == 10


def test_a_rated_sqlite_claim_runs_as_many_steps_with_6000_claims_in_its_windows(sqlite_target):
    with sqlite_target.open() as store:
        rated(store)
        claim_jobs(store, 1_000)
        few = sqlite_steps(store, RATED)
        claim_jobs(store, 5_000)
        many = sqlite_steps(store, RATED)
        assert many <= few + 50, (few, many)  # with the count: 339,946 and 609,946
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6_000


def test_a_rated_claim_reads_as_much_with_6000_claims_in_its_windows_as_with_1000(pg_target):
    with pg_target.open() as store, psycopg.connect(pg_target.url) as conn:
        rated(store)
        claim_jobs(store, 1_000)
        few = log_blocks(conn, pg_target.schema, "q")
        claim_jobs(store, 5_000)
        many = log_blocks(conn, pg_target.schema, "q")
        assert many <= few + 3, (few, many)
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6_000
        assert use.rates.keys_used == {"*": 6_000}
