"""Celery worker subprocesses where processes matter: kill -9, several workers, control."""

from __future__ import annotations

import collections
import json
import os
import signal
import time

import pytest

from tests.helpers import kill_group, make_app, read_record, wait_for, worker_process


def _app_for(target, **options):
    """The subprocess app, configured for this test's store (in this process too)."""
    opts = dict(target.transport_options, polling_interval=1.0, **options)
    app = make_app(target, transport_options=opts)
    return app, {"ALKSTORE_TEST_OPTIONS": json.dumps(opts)}


def _keys(record, tag=None):
    return [row[0] for row in read_record(record) if tag is None or row[0].startswith(tag)]


def test_inspect_ping_two_workers_and_shutdown_one(target, tmp_path):
    app, env = _app_for(target)
    record = tmp_path / "record.tsv"
    with (
        worker_process(target, record, "-n", "alpha@%h", "-c", "1", **env) as a,
        worker_process(target, record, "-n", "beta@%h", "-c", "1", **env) as b,
    ):

        def both_answer():
            replies = app.control.inspect(timeout=2).ping() or {}
            return len(replies) == 2 and replies

        replies = wait_for(both_answer, 40, interval=0.5)
        assert all(r == {"ok": "pong"} for r in replies.values())
        alpha = next(name for name in replies if name.startswith("alpha@"))
        app.control.broadcast("shutdown", destination=[alpha])
        wait_for(lambda: a.poll() is not None, 30)
        time.sleep(1.0)
        assert b.poll() is None, "the other worker must keep running"
        replies = app.control.inspect(timeout=2).ping() or {}
        assert list(replies) == [alpha.replace("alpha@", "beta@")]


def test_kill_9_with_acks_late_every_task_completes(target, tmp_path):
    app, env = _app_for(target, visibility_timeout=3)
    record = tmp_path / "record.tsv"
    for i in range(20):
        app.send_task("tests.apps.proj.mark", (f"k{i}", 0.5))
    args = ("-c", "2", "-P", "prefork")
    with worker_process(target, record, *args, ALKSTORE_TEST_ACKS_LATE="1", **env) as first:
        wait_for(lambda: len(_keys(record)) >= 2, 40)
        kill_group(first, signal.SIGKILL)
    done_before = set(_keys(record))
    assert len(done_before) < 20, "the kill must interrupt the backlog"
    with worker_process(target, record, *args, ALKSTORE_TEST_ACKS_LATE="1", **env):
        wait_for(lambda: set(_keys(record)) >= {f"k{i}" for i in range(20)}, 60)
    with target.open() as store:
        assert store.dead_list() == []


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_warm_shutdown_mid_backlog_runs_every_task_once(target, tmp_path, pool):
    """SIGTERM (a deploy) while acks_late tasks run and more wait in the prefetch: the
    running ones finish and ack during the warm shutdown, the prefetched ones go back at
    once (not after the visibility timeout) and the next worker runs them; none twice."""
    app, env = _app_for(target)  # the default 300 s visibility timeout
    record = tmp_path / "record.tsv"
    for i in range(12):
        app.send_task("tests.apps.proj.mark", (f"w{i}", 1.5))
    args = ("-c", "2", "-P", pool)
    with worker_process(target, record, *args, ALKSTORE_TEST_ACKS_LATE="1", **env) as first:
        wait_for(lambda: len(_keys(record)) >= 2, 40)  # the next two are running now
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
    done_before = set(_keys(record))
    assert 2 <= len(done_before) < 12, "the shutdown must interrupt the backlog"
    started = time.monotonic()
    with worker_process(target, record, *args, ALKSTORE_TEST_ACKS_LATE="1", **env):
        wait_for(lambda: set(_keys(record)) >= {f"w{i}" for i in range(12)}, 60)
        time.sleep(2)  # a second run of any task would be recorded by now
    assert time.monotonic() - started < 60  # far inside the 300 s timeout
    runs = collections.Counter(_keys(record))
    assert [k for k, n in runs.items() if n > 1] == []
    with target.open() as store:
        assert store.dead_list() == []
        assert all(c.pending == c.processing == 0 for c in store.counts(["celery"]))


def test_poison_task_is_dead_lettered_after_max_attempts(target, tmp_path):
    app, env = _app_for(target, visibility_timeout=5, max_attempts=3, backoff_base=0.2)
    record = tmp_path / "record.tsv"
    poison = app.send_task("tests.apps.proj.suicide", ("p",))
    for i in range(10):
        app.send_task("tests.apps.proj.mark", (f"ok{i}",))
    args = ("-c", "1", "-P", "prefork")
    with (
        target.open() as store,
        worker_process(target, record, *args, ALKSTORE_TEST_ACKS_LATE="1", **env),
    ):

        def dead():
            job = store.get_job(poison.id)
            return job is not None and job.state == "dead" and job

        job = wait_for(dead, 90, interval=0.5)
        wait_for(lambda: len(_keys(record, "ok")) == 10, 60)
    deliveries = [row for row in read_record(record) if row[0] == "suicide"]
    assert len(deliveries) == 3
    assert job.attempts == 3
    assert job.last_error == "attempts exhausted"


@pytest.mark.parametrize("workers,tasks", [(3, 3000)])
def test_several_workers_execute_each_task_exactly_once(target, tmp_path, workers, tasks):
    app, env = _app_for(target)
    record = tmp_path / "record.tsv"
    with app.producer_or_acquire() as producer:
        for i in range(tasks):
            app.send_task("tests.apps.proj.mark", (f"t{i}",), producer=producer)
    args = ("-c", "2", "-P", "prefork")
    procs = []
    try:
        for n in range(workers):
            cm = worker_process(
                target, record, *args, "-n", f"w{n}@%h", ALKSTORE_TEST_ACKS_LATE="1", **env
            )
            procs.append((cm, cm.__enter__()))
        wait_for(lambda: len(_keys(record)) >= tasks, 240, interval=0.5)
        time.sleep(2)  # anything executed twice would show up now
    finally:
        for cm, _ in procs:
            cm.__exit__(None, None, None)
    rows = read_record(record)
    counts = collections.Counter(row[0] for row in rows)
    assert len(counts) == tasks
    assert [k for k, c in counts.items() if c > 1] == []
    hosts = {row[3] for row in rows}
    assert len(hosts) == workers, f"every worker should take part: {hosts}"
    assert os.path.exists(record)
