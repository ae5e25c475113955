"""Fair share with real worker processes (issue 32, docs/flow-control.md "Fair share"),
on both engines.

Two ``celery worker`` subprocesses (prefork and threads, 2 slots each, prefetch 1,
acks_late) consume a fair queue holding 1,000 tasks of tenant A published before 40 of
tenant B. The tasks record their starts (outside the broker): every B task starts
within the first 2 x 40 + 8 starts (B's half of the claims while both have tasks, plus
the 4 slots and 4 prefetched tasks the workers may hold when B arrives at the front),
while in claim order B would start after the 1,000 of A.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import make_app, read_record, wait_for, worker_processes

pytestmark = pytest.mark.timeout(300)

APP = "tests.flow.limits_app"
QUEUE = "fair"
FLOOD, FEW = 1000, 40
BOUND = 2 * FEW + 8


def test_a_late_tenant_starts_within_the_bound_while_another_floods(target, tmp_path):
    opts = dict(target.transport_options, polling_interval=1.0)
    app = make_app(target, transport_options=opts)

    @app.task(name="limits.span", shared=False, alkstore_limit_key=lambda a, kw: a[1])
    def span(n, key, duration):
        return n

    record = tmp_path / "record.tsv"
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_PREFETCH": "1"}
    with target.open() as store:
        store.set_fair(QUEUE)
        with app.producer_or_acquire() as producer:
            for n in range(FLOOD + FEW):
                key = "tenant-a" if n < FLOOD else "tenant-b"
                span.apply_async((n, key, 0.005), queue=QUEUE, producer=producer)
        workers = [("w1", ("-P", "prefork", "-c", "2")), ("w2", ("-P", "threads", "-c", "2"))]
        with worker_processes(target, record, workers, QUEUE, APP, tmp_path, **env):

            def b_started() -> int:
                return sum(r[0] == "start" and r[2] == "tenant-b" for r in read_record(record))

            wait_for(lambda: b_started() >= FEW, 120, interval=0.2)
    starts = sorted((float(r[3]), r[2]) for r in read_record(record) if r[0] == "start")
    keys = [k for _, k in starts]
    assert keys.count("tenant-b") == FEW
    last_b = max(i for i, k in enumerate(keys) if k == "tenant-b") + 1
    print(f"last B task: start {last_b} of {len(keys)}")
    assert last_b <= BOUND, f"the last B task was start {last_b}, the bound is {BOUND}"
