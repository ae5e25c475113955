"""Global rate limits with real worker processes (issue 32), on both engines.

Three ``celery worker`` subprocesses (prefork and threads, eight slots in all, more
than the rate lets run) share a queue limited to 10 claims per second, and every key
to 4 per second; short tasks record when they start. Over sliding windows of one
second, the claims the store logged (the database's clock) never exceed the rates,
and neither do the starts the tasks recorded, within the documented edge: a start
follows its claim by the time the claim takes to reach the worker, so starts are
checked over windows of 1 s less a 0.2 s margin. The rate is lowered at run time, and
countdown tasks mixed in never start before their ETA. Tasks are acks_late with
prefetch 1, so a worker claims only when a slot is free and starts what it claims.
The safety poll is slow (10 s): the throttled workers wake when a window frees.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from kombu_alkstore.store.rate_values import max_in_window
from tests.helpers import make_app, read_record, wait_for, worker_process

pytestmark = pytest.mark.timeout(300)

APP = "tests.flow.limits_app"
QUEUE = "rated"
KEYS = ("tenant-a", "tenant-b", "tenant-c")


def test_rates_hold_across_worker_processes(target, tmp_path):
    tasks = 70
    opts = dict(target.transport_options, polling_interval=10.0)
    app = make_app(target, transport_options=opts)

    @app.task(name="limits.span", shared=False, alkstore_limit_key=lambda a, kw: a[1])
    def span(n, key, duration):
        return n

    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_PREFETCH": "1"}
    record = tmp_path / "record.tsv"
    etas: dict[str, float] = {}
    with target.open() as store:
        store.set_rate(QUEUE, "10/s")
        store.set_rate(QUEUE, "4/s", key="*")
        # a rate no job uses, with a long period: the log keeps every claim to check
        store.set_rate(QUEUE, "1000000/h", key="unused-key")
        with app.producer_or_acquire() as producer:
            for n in range(tasks):
                span.apply_async((n, KEYS[n % len(KEYS)], 0.01), queue=QUEUE, producer=producer)
            for n in range(tasks, tasks + 4):
                eta = time.time() + 3.0
                etas[str(n)] = eta
                span.apply_async(
                    (n, KEYS[n % len(KEYS)], 0.01), queue=QUEUE, producer=producer,
                    eta=datetime.fromtimestamp(eta, timezone.utc),
                )  # fmt: skip
        total = tasks + len(etas)
        workers = [
            ("w1", ("-P", "prefork", "-c", "3")),
            ("w2", ("-P", "threads", "-c", "3")),
            ("w3", ("-P", "prefork", "-c", "2")),
        ]
        procs = []
        try:
            for name, args in workers:
                cm = worker_process(
                    target, record, *args, "-n", f"{name}@%h", "-Q", QUEUE,
                    app=APP, log=tmp_path / f"{name}.log", **env,
                )  # fmt: skip
                procs.append((cm, cm.__enter__()))

            def started() -> int:
                return len({r[1] for r in read_record(record) if r[0] == "start"})

            wait_for(lambda: started() >= 30, 120, interval=0.1)
            store.set_rate(QUEUE, "5/s")  # lowered at run time
            lowered = time.time()
            wait_for(lambda: started() >= total, 180, interval=0.2)
            logged = store.claims_logged(QUEUE)
        finally:
            for cm, _ in procs:
                cm.__exit__(None, None, None)
    starts = {r[1]: (float(r[3]), r[2]) for r in read_record(record) if r[0] == "start"}
    assert len(starts) == total
    assert len(logged) >= total
    # The store's log: exact, by the database's clock.
    assert max_in_window(logged, 1.0) <= 10
    # What the workers saw (this machine's clock), within the documented edge.
    times = [at for at, _ in starts.values()]
    assert max_in_window(times, 1.0 - 0.2) <= 10
    for key in KEYS:
        assert max_in_window([at for at, k in starts.values() if k == key], 1.0 - 0.2) <= 4
    after = [at for at, _ in starts.values() if at > lowered + 1.0]
    assert max_in_window(after, 1.0 - 0.2) <= 5
    for n, eta in etas.items():
        assert starts[n][0] >= eta - 0.01, f"task {n} started {eta - starts[n][0]:.3f} s early"
    # the workers used the room they had (not a bound on speed: 10 a second at most)
    assert max_in_window(times, 1.0) >= 3
    hosts = {r[5].split("@")[0] for r in read_record(record)}
    assert len(hosts) >= 2
