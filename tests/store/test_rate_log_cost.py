"""A rated claim's reads do not grow with the claims its windows hold (migration 14,
docs/flow-control.md "How it is enforced"): the rates' log numbers its rows (claim_log.n
per queue, kn per key), so a window's use is its last ordinal less its first, two index
probes, where a count of the window's rows read every one of them (a queue at
1000000/s: ~3,900 rows per claim).

A real PostgreSQL, its own schema. Counted, not timed: the shared buffers of the store's
own ``limited_picks`` (``EXPLAIN (ANALYZE, BUFFERS)``, rolled back) with 1,000 and with
6,000 claims within a queue-wide and a per-key window.
"""

from __future__ import annotations

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


def test_a_rated_claim_reads_as_much_with_6000_claims_in_its_windows_as_with_1000(pg_target):
    schema = pg_target.schema
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
    ):
        store.set_rate("q", "1000000/h")  # never throttles: every claim stays in the window
        store.set_rate("q", "1000000/h", key="*")
        store.enqueue_many([NewJob("q", keyed_body("k", n)) for n in range(6_200)])

        def claimed(count: int) -> int:
            for _ in range(count // 10):
                assert len(store.claim(["q"], 10)) == 10
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
