"""The duplicate storm of issue 14 (defect 0), repeated: three ``--pool threads -c 4``
workers with ``task_acks_late``, default transport options, a burst of 3,000 tasks from
one producer, on a fresh PostgreSQL cluster whose schema and default queue already had a
busy history (workers killed with -9 mid-backlog with 2 s and 5 s visibility timeouts and
countdowns, a poison task, a remote-control shutdown, extra bindings). Twenty runs, each
with zero tasks executed twice.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal

import pytest
from kombu import Exchange, Queue

from tests.helpers import cluster_app, kill_group, make_app, read_record, wait_for, worker_process
from tests.private_pg import private_cluster

RUNS = 20
TASKS = 3000


def _history(target, tmp_path) -> None:
    """What earlier Celery tests left in the schema and the default queue."""
    for vt in (2, 5):
        _history_round(target, tmp_path, vt)


def _history_round(target, tmp_path, vt: float) -> None:
    rec = tmp_path / "history.tsv"
    opts = dict(
        target.transport_options, polling_interval=1.0, visibility_timeout=vt, backoff_base=0.2
    )
    app = make_app(target, transport_options=opts)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_ACKS_LATE": "1"}
    for i in range(20):
        app.send_task("tests.apps.proj.mark", (f"h{vt}-{i}", 0.2), countdown=i % 3)
    poison = app.send_task("tests.apps.proj.suicide", (f"p{vt}",))
    killed = tmp_path / "history-killed.log"
    # A node name of its own: a queue of a previous round's node (same name) may still
    # hold that round's shutdown broadcast, as it would on any broker.
    node = ("-c", "2", "-n", f"k{vt}@%h")
    with target.open() as store, worker_process(target, rec, *node, log=killed, **env) as w:

        def poison_dead() -> bool:
            job = store.get_job(poison.id)
            return job is not None and job.state == "dead"

        try:
            wait_for(poison_dead, 180)
        except AssertionError:
            print(killed.read_text()[-4000:])
            raise
        kill_group(w, signal.SIGKILL)
    log = tmp_path / "history.log"
    threads = ("-c", "2", "-P", "threads", "-n", f"sd{vt}@%h")
    with worker_process(target, rec, *threads, log=log, **env) as w:
        done = {f"h{vt}-{i}" for i in range(20)}
        wait_for(lambda: done <= {r[0] for r in read_record(rec)}, 90)
        wait_for(lambda: app.control.inspect(timeout=1).ping(), 60)  # pidbox bound
        app.control.broadcast("shutdown")
        wait_for(lambda: w.poll() is not None, 30)
    with app.connection_for_write() as conn:  # a routing test's extra bindings
        Queue("celery", Exchange("extra", "topic"), routing_key="celery.#")(conn).declare()


def _storm(target, env, app, tmp_path, run: int) -> collections.Counter:
    rec = tmp_path / f"storm{run}.tsv"
    procs = []
    try:
        for n in range(3):
            cm = worker_process(
                target, rec, "-P", "threads", "-c", "4", "-n", f"mc{n}-{run}@%h", **env
            )
            procs.append((cm, cm.__enter__()))
        with app.producer_or_acquire() as producer:
            for i in range(TASKS):
                app.send_task("tests.apps.proj.mark", (f"t{i}",), producer=producer)
        wait_for(lambda: len({r[0] for r in read_record(rec)}) >= TASKS, 120, interval=0.2)
        wait_for(lambda: _drained(target), 10, interval=0.2)
    finally:
        for cm, _ in procs:
            cm.__exit__(None, None, None)
    return collections.Counter(r[0] for r in read_record(rec))


def _drained(target) -> bool:
    with target.open() as store:
        return all(c.pending == c.processing == 0 for c in store.counts(["celery"]))


@pytest.mark.slow
@pytest.mark.timeout(900)  # the history and twenty bursts: about 5 minutes on 2 cores
def test_a_burst_after_a_busy_history_runs_every_task_once(tmp_path):
    with private_cluster() as cluster:
        target, opts, app, _ = cluster_app(cluster)
        _history(target, tmp_path)
        defaults = {"ALKSTORE_TEST_OPTIONS": json.dumps(target.transport_options)}
        env = {**defaults, "ALKSTORE_TEST_ACKS_LATE": "1"}
        producer = make_app(target)  # default transport options, as the workers
        producer.conf.broker_transport_options = dict(target.transport_options)
        duplicated = {}
        for run in range(RUNS):
            counts = _storm(target, env, producer, tmp_path, run)
            assert len(counts) == TASKS
            extra = {k: c for k, c in counts.items() if c > 1}
            if extra:
                duplicated[run] = len(extra)
        with contextlib.suppress(Exception):
            producer.close()
        assert duplicated == {}, f"runs with tasks executed more than once: {duplicated}"
