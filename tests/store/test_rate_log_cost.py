"""A rated claim's reads do not grow with the claims its windows hold (migration 14,
docs/flow-control.md "How it is enforced"): the rates' log numbers its rows (claim_log.n
per queue, kn per key), so a window's use is its last ordinal less its first, two index
probes, where a count of the window's rows read every one of them (a queue at
1000000/s: ~3,900 rows per claim). Nor, on SQLite, with the backlog of a limited queue.

Counted, not timed, with 1,000 and with 6,000 claims within a queue-wide and a per-key
window: on a real PostgreSQL (its own schema), the shared buffers of the store's own
``limited_picks`` (``EXPLAIN (ANALYZE, BUFFERS)``, rolled back); on a SQLite file, the
virtual machine instructions of the store's own statements around a rated claim (the
pick, the trim and the throttle check; rolled back).
"""

from __future__ import annotations

import json
import sqlite3
import time

import psycopg

from kombu_alkstore.store import NewJob
from tests.helpers import explained_plan
from tests.store.conformance.helpers import keyed_body


def picks_buffers(conn: psycopg.Connection, schema: str, queue: str) -> int:
    """Shared buffers (hit + read) of one rated pick of 10 from ``queue`` (rolled back),
    the second of two: the first also reads the catalogs, planning the function."""
    for _ in range(2):
        plan = explained_plan(
            conn,
            f'SELECT * FROM "{schema}".limited_picks(%(qs)s, 10, '
            "extract(epoch FROM clock_timestamp()), 100)",
            {"qs": [queue]},
        )
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


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


def sqlite_steps(store, path: str, names: tuple[str, ...] = RATED) -> int:
    """SQLite virtual machine instructions of the store's statements ``names`` (by
    default a rated claim's own but the claim's update), run on a connection of our own
    and rolled back."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    params = {"queues": json.dumps(["q"]), "limit": 10, "now": time.time(), "ids": "[]"}
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.set_progress_handler(count, 1)
        for name in names:
            conn.execute(store._sql[name], params).fetchall()
        conn.set_progress_handler(None, 1)
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return steps


def test_a_rated_sqlite_claim_runs_as_many_steps_with_6000_claims_in_its_windows(sqlite_target):
    with sqlite_target.open() as store:
        rated(store)
        claim_jobs(store, 1_000)
        few = sqlite_steps(store, str(store.path))
        claim_jobs(store, 5_000)
        many = sqlite_steps(store, str(store.path))
        assert many <= few + 50, (few, many)  # with the count: 339,946 and 609,946
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6_000


def test_a_rated_claim_reads_as_much_with_6000_claims_in_its_windows_as_with_1000(pg_target):
    schema = pg_target.schema
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
    ):
        rated(store)

        def claimed(count: int) -> int:
            claim_jobs(store, count)
            # the claims' moved index entries gone, so that only the log can differ
            admin.execute(f'VACUUM "{schema}".jobs')
            (logged,) = admin.execute(
                f'SELECT count(*) FROM "{schema}".claim_log WHERE limit_key = %s', ("k",)
            ).fetchone()
            return logged

        assert claimed(1_000) == 1_000
        few = picks_buffers(explain, schema, "q")
        assert claimed(5_000) == 6_000
        many = picks_buffers(explain, schema, "q")
        assert many <= few + 3, (few, many)
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6_000
        assert use.rates.keys_used == {"*": 6_000}


def test_a_limited_sqlite_claim_runs_as_many_steps_with_20000_due_as_with_1000(sqlite_target):
    """The claim of a queue with a limit picks the other queues' jobs with the limited
    queues left out of its walk: a filter after the walk read every due job of the
    limited queue, to drop them all (135,258 steps with 1,000 due, 382,258 with 20,000)."""
    with sqlite_target.open() as store:
        store.set_rate("q", "1000000/h")
        store.enqueue_many([NewJob("q", b"{}") for _ in range(1_000)])
        few = sqlite_steps(store, str(store.path), ("claim_pick_limited",))
        store.enqueue_many([NewJob("q", b"{}") for _ in range(19_000)])
        many = sqlite_steps(store, str(store.path), ("claim_pick_limited",))
        assert many <= few + 50, (few, many)
        assert len(store.claim(["q"], 10)) == 10


def test_a_sqlite_claim_probe_of_a_throttled_queue_runs_as_many_steps_with_10000_due(
    sqlite_target,
):
    """The read before a claim (claim_probe) leaves a queue its rate throttles out of its
    walk: a filter after the walk read every due job of it, to find nothing (12,420
    steps with 1,000 due, 120,420 with 10,000), on every wake of a worker."""
    with sqlite_target.open() as store:
        store.set_rate("q", "1/h")
        store.enqueue_many([NewJob("q", b"{}") for _ in range(1_000)])
        assert len(store.claim(["q"], 10)) == 1
        assert store.claim(["q"], 10) == []  # throttled until the hour is over
        few = sqlite_steps(store, str(store.path), ("claim_probe",))
        store.enqueue_many([NewJob("q", b"{}") for _ in range(9_000)])
        many = sqlite_steps(store, str(store.path), ("claim_probe",))
        assert many <= few + 50, (few, many)
        assert not store.has_due(["q"])
