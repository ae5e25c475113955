"""Global concurrency limits with real worker processes (issue 32), on both engines.

Three ``celery worker`` subprocesses (prefork and threads, ten slots in all) share a
queue limited to 3 claimed at once, with a per-key limit of 2 for every key; the tasks
(random durations) record when they start and end, and the measured number running at
once never exceeds either limit, with one worker killed -9 mid-run (its claims lapse
after the visibility timeout and run again elsewhere) and the limit lowered to 2 at run
time. Tasks are acks_late: the claim covers the run (docs/flow-control.md).
"""

from __future__ import annotations

import json
import random
import signal
import time

import pytest

from tests.helpers import kill_group, make_app, read_record, wait_for, worker_processes

pytestmark = pytest.mark.timeout(300)

APP = "tests.flow.limits_app"
QUEUE = "limited"
KEYS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d")


def intervals(record, killed: dict[str, float]) -> list[tuple[float, float, str, str]]:
    """(start, end, key, task) of every run; a run with no end (its worker was killed
    -9) ends at the kill."""
    starts: dict[tuple[str, str], tuple[float, str]] = {}
    runs = []
    for row in read_record(record):
        kind, n, key, at, pid, host = row[:6]
        if kind == "start":
            starts[(n, pid)] = (float(at), key)
        else:
            began, _ = starts.pop((n, pid))
            runs.append((began, float(at), key, n))
    for (n, _pid), (began, key) in starts.items():
        host_kill = min(killed.values()) if killed else began
        runs.append((began, max(began, host_kill), key, n))
    return runs


def peak(runs, since: float = 0.0, key: str | None = None) -> int:
    """The most runs at once (among those of ``key``), counted from ``since`` on."""
    events = []
    for began, ended, k, _ in runs:
        if key is not None and k != key:
            continue
        if ended <= since:
            continue
        events.append((max(began, since), 1))
        events.append((ended, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def test_the_limit_holds_across_worker_processes_with_a_kill_and_a_change(target, tmp_path):
    tasks = 900
    opts = dict(target.transport_options, polling_interval=1.0, visibility_timeout=2.0)
    app = make_app(target, transport_options=opts)

    # The producer's own task of the same name: its decorator option gives the default
    # limit key (the second argument); half the calls give the header themselves.
    @app.task(name="limits.span", shared=False, alkstore_limit_key=lambda a, kw: a[1])
    def span(n, key, duration):
        return n

    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts)}
    record = tmp_path / "record.tsv"
    rnd = random.Random(32)
    with target.open() as store:
        store.set_limit(QUEUE, 3)
        store.set_limit(QUEUE, 2, key="*")
        with app.producer_or_acquire() as producer:
            for n in range(tasks):
                key = KEYS[n % len(KEYS)]
                args = (n, key, rnd.uniform(0.002, 0.04))
                if n % 2:
                    span.apply_async(args, queue=QUEUE, producer=producer)
                else:
                    headers = {"alkstore_limit_key": key}
                    span.apply_async(args, queue=QUEUE, producer=producer, headers=headers)
        workers = [
            ("w1", ("-P", "prefork", "-c", "4")),
            ("w2", ("-P", "threads", "-c", "4")),
            ("w3", ("-P", "prefork", "-c", "2")),
        ]
        killed: dict[str, float] = {}
        with worker_processes(target, record, workers, QUEUE, APP, tmp_path, **env) as procs:

            def ended() -> int:
                return len({r[1] for r in read_record(record) if r[0] == "end"})

            wait_for(lambda: ended() >= tasks // 3, 120, interval=0.2)
            kill_group(procs[0], signal.SIGKILL)
            killed["w1"] = time.time()
            wait_for(lambda: ended() >= tasks // 2, 120, interval=0.2)
            store.set_limit(QUEUE, 2)  # lowered at run time
            lowered = time.time()
            try:
                wait_for(lambda: ended() >= tasks, 180, interval=0.5)
            finally:
                print("counts", store.counts([QUEUE]), "limits", store.limits(), ended())
            used = store.limits()
    runs = intervals(record, killed)
    assert len({n for *_, n in runs}) == tasks  # every task ran (the killed ones again)
    overall = peak(runs)
    assert overall <= 3, f"{overall} ran at once, the limit is 3"
    assert overall >= 2, "the workers should have used the room they had"
    for key in KEYS:
        assert peak(runs, key=key) <= 2, key
    # The claims held when it was lowered ran on (tasks last < 0.05 s); a second later
    # every run is within the new limit.
    after = peak(runs, since=lowered + 1.0)
    assert after <= 2, f"{after} ran at once after the limit was lowered to 2"
    assert [(u.queue, u.limit, u.keys) for u in used] == [(QUEUE, 2, {"*": 2})]
    hosts = {row[5].split("@")[0] for row in read_record(record)}
    assert {"w2", "w3"} <= hosts
