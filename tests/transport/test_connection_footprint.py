"""A worker's connections to PostgreSQL (issue 18: an idle worker host holds at most 2, a
busy one 2 and one per pool process that publishes; the one maintenance lease holder of a
deployment one more while jobs flow, for its rotations of jobs' generations).

A ``celery worker`` subprocess, its connections told apart by ``application_name``: once
started it keeps its LISTEN connection and its claims connection and nothing else, over
more than one period of anything periodic it does (Celery's worker heartbeat events every
2 s, the safety-net poll, the maintenance round), while it works through bursts of tasks
that do not publish (claims, hand-offs and the jobs handed back when a hand-off races a
claim, acks, countdowns falling due), and while it holds claims through many heartbeats.
Pooled connections are closed after 1 s unused here (``pool_max_idle``), so one opened
now and then is seen.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from tests.conftest import Target
from tests.helpers import (
    lease_held_elsewhere,
    make_app,
    options_env,
    read_record,
    wait_for,
    worker_process,
)

pytestmark = pytest.mark.slow

#: Seconds watched once the worker is up: longer than every period of an idle worker.
WATCH = 36.0


def _connections(url: str, name: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        return conn.execute(sql, (name,)).fetchone()[0]


def _named(pg_target: Target, prefix: str) -> tuple[Target, str]:
    """``pg_target`` with its connections named apart (the producer's are not)."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in pg_target.url else "?"
    return Target(
        "postgresql", f"{pg_target.url}{sep}application_name={name}", pg_target.schema
    ), name


def test_an_idle_worker_holds_two_connections(pg_target, tmp_path):
    """Its loop refreshes its queues and asks for the maintenance lease on its claims
    connection. (The one worker holding the lease runs each round on a pooled connection
    from its housekeeping thread, which it then holds for pool_max_idle: here another
    holds the lease.)"""
    target, name = _named(pg_target, "idle")
    env = options_env(pool_max_idle=1.0, polling_interval=2.0, sweep_interval=5.0)
    record = tmp_path / "record.tsv"
    lease_held_elsewhere(pg_target)
    with worker_process(target, record, "-P", "prefork", "-c", "2", **env) as proc:
        wait_for(lambda: _connections(pg_target.url, name) >= 2, 60, interval=0.2)
        time.sleep(4)  # start-up (declares, mingle) is over; its pooled connection closes
        seen = []
        end = time.monotonic() + WATCH
        while time.monotonic() < end:
            assert proc.poll() is None, "the worker exited"
            seen.append(_connections(pg_target.url, name))
            time.sleep(0.25)
    assert max(seen) <= 2, f"connections seen while idle (every 0.25 s): {seen}"
    assert min(seen) == 2, f"the LISTEN and claims connections were not both held: {seen}"


def test_a_busy_worker_whose_tasks_do_not_publish_holds_two_connections(pg_target, tmp_path):
    """Every worker but the maintenance lease holder (here another holds the lease)."""
    lease_held_elsewhere(pg_target)
    seen, extra = _busy(pg_target, tmp_path, "busy")
    assert max(seen) <= 2, f"connections seen while busy (every 0.05 s): {seen}; {extra}"


def test_the_busy_lease_holder_rotates_on_one_more_connection(pg_target, tmp_path):
    """The holder takes the lease at start and, while jobs flow, rotates jobs' generations
    about once a second from a thread of its own on a pooled connection, which it holds
    meanwhile (pool_max_idle): three connections, never more."""
    seen, extra = _busy(pg_target, tmp_path, "holder")
    assert max(seen) <= 3, f"connections seen while busy (every 0.05 s): {seen}; {extra}"
    assert any(".rotate_gen" in q for now in extra for q in now), extra  # (cut at 60)


def _busy(pg_target: Target, tmp_path, prefix: str) -> tuple[list[int], list[list[str]]]:
    """A prefork worker through bursts of tasks that do not publish: :func:`_watch`'s
    samples over all of them."""
    target, name = _named(pg_target, prefix)
    env = options_env(pool_max_idle=1.0)
    record = tmp_path / "record.tsv"
    producer = make_app(pg_target)
    with worker_process(target, record, "-P", "prefork", "-c", "4", **env) as proc:
        wait_for(lambda: _connections(pg_target.url, name) >= 2, 60, interval=0.2)
        time.sleep(4)  # start-up (declares, mingle) is over; its pooled connection closes
        seen, extra = [], []
        sent = 0
        # Bursts with pauses between: the worker goes idle and offers its slots, so each
        # burst starts with hand-offs racing its claims. Two countdowns per burst fall
        # due while it works or after (the loop then asks when the next one is due).
        for burst in (1, 5, 20, 60, 150, 300):
            for i in range(burst + 2):
                countdown = 1.0 if i < 2 else None
                producer.send_task("tests.apps.proj.mark", (f"b{sent}",), countdown=countdown)
                sent += 1
            got, more = _watch(pg_target.url, name, proc, record, sent, 30, every=0.05)
            seen += got
            extra += more
            time.sleep(0.5)
    return seen, extra


def test_a_worker_holding_claims_beats_on_its_claims_connection(pg_target, tmp_path):
    """acks_late tasks held through several beats (one a second): the event loop extends
    their claims on its claims connection, opening no pooled connection for it, and each
    task runs once (a beat missed for 3 s would let a claim lapse and the task run again).
    (Another holds the lease: the holder rotates while claimed jobs are live.)"""
    lease_held_elsewhere(pg_target)
    target, name = _named(pg_target, "beats")
    env = options_env(pool_max_idle=1.0, visibility_timeout=3.0)
    record = tmp_path / "record.tsv"
    producer = make_app(pg_target, transport_options={"visibility_timeout": 3.0})
    worker = ("-P", "prefork", "-c", "2")
    with worker_process(target, record, *worker, ALKSTORE_TEST_ACKS_LATE="1", **env) as proc:
        wait_for(lambda: _connections(pg_target.url, name) >= 2, 60, interval=0.2)
        time.sleep(4)  # start-up (declares, mingle) is over; its pooled connection closes
        keys = [f"long{i}" for i in range(4)]
        for key in keys:  # two run 5 s while two wait in the prefetch, all held
            producer.send_task("tests.apps.proj.mark", (key, 5.0))
        seen, extra = _watch(pg_target.url, name, proc, record, len(keys), 40, every=0.1)
        time.sleep(4)  # a lapsed claim would be claimed and run again meanwhile
    assert sorted(r[0] for r in read_record(record)) == keys, "a task ran twice"
    assert max(seen) <= 2, f"connections seen while holding (every 0.1 s): {seen}; {extra}"


def _watch(
    url: str, name: str, proc, record, runs: int, timeout: float, every: float
) -> tuple[list[int], list[list[str]]]:
    """Sample the connections named ``name`` every ``every`` s until ``runs`` task runs
    are recorded: their counts, and the statements of each sample over 2."""
    seen, extra = [], []
    end = time.monotonic() + timeout
    while len(read_record(record)) < runs:
        assert time.monotonic() < end, f"{len(read_record(record))}/{runs} ran"
        assert proc.poll() is None, "the worker exited"
        now = _queries(url, name)
        seen.append(len(now))
        if len(now) > 2:
            extra.append(now)
        time.sleep(every)
    return seen, extra


def _queries(url: str, name: str) -> list[str]:
    """The last statement of each connection named ``name``."""
    with psycopg.connect(url, autocommit=True) as conn:
        sql = "SELECT left(query, 60) FROM pg_stat_activity WHERE application_name = %s"
        return [r[0] for r in conn.execute(sql, (name,))]
