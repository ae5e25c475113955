"""Revoke on this broker: a revoke wins the race against a task queued behind busy work
(the solo pool runs each task in the event loop, so the rest of a batch is checked again),
and it is durable: a delayed task revoked before every worker restarted never runs and
ends REVOKED in the result backend."""

from __future__ import annotations

import json
import signal
import time
import uuid

import psycopg
import pytest
from celery.exceptions import TaskRevokedError

import kombu_alkstore
from tests.helpers import kill_group, make_app, read_record, thread_worker, wait_for, worker_process

REDIS = "redis://127.0.0.1:6379/{db}"


def _redis_backend() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS.format(db=0)).ping()
    except redis.ConnectionError as exc:  # fail, never skip
        pytest.fail(f"Redis is required for this test and is not reachable: {exc}")
    return REDIS.format(db=11)


def test_a_task_queued_behind_busy_work_is_revoked(target):
    """Celery's own t/integration test_tasks.py::test_revoked, in a solo worker."""
    app = make_app(target)

    @app.task(shared=False)
    def sleeping(seconds):
        time.sleep(seconds)

    @app.task(shared=False)
    def add(x, y):
        return x + y

    with thread_worker(app, pool="solo", concurrency=1):
        for _ in range(4):
            sleeping.delay(1)
        result = add.apply_async((1, 1))
        result.revoke()
        with pytest.raises(TaskRevokedError):
            result.get(timeout=30)


@pytest.mark.parametrize("serializer", ["json", "pickle"])
def test_revoke_marks_the_jobs_the_broker_holds(target, serializer):
    """Whatever serializer the app sends its control messages with (Celery uses
    task_serializer for them)."""
    app = make_app(target, task_serializer=serializer, accept_content=[serializer, "json"])
    with app.connection_for_write() as conn:  # the tables
        conn.ensure_connection()
    soon = app.send_task("x.task", countdown=60)
    other = app.send_task("x.task", countdown=60)
    app.control.revoke(soon.id)
    with target.open() as store:
        assert store.get_job(soon.id).state == "pending"
        marked = {j.msg_id for j in store.scheduled() if j.id in store.revoked_among([j.id])}
    assert marked == {soon.id}
    assert other.id not in marked


def test_a_revoked_delayed_task_never_runs_after_every_worker_restarts(pg_target, tmp_path):
    backend = _redis_backend()
    opts = dict(pg_target.transport_options, polling_interval=1.0)
    app = make_app(pg_target, transport_options=opts)
    app.conf.result_backend = backend
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_BACKEND": backend}
    record = tmp_path / "record.tsv"
    key = f"revoked-{uuid.uuid4().hex[:6]}"
    args = ("-c", "2", "-P", "prefork")
    with worker_process(pg_target, record, *args, "-n", "a@%h", **env) as a:
        wait_for(lambda: app.control.inspect(timeout=1).ping(), 60, interval=0.5)
        revoked = app.send_task("tests.apps.proj.mark", (key,), countdown=30)
        kept = app.send_task("tests.apps.proj.mark", ("kept",), countdown=30)
        revoked.revoke()
        time.sleep(1.0)
        kill_group(a, signal.SIGKILL)  # its revoked list (in memory) dies with it
    eta = time.time() + 29
    with worker_process(pg_target, record, *args, "-n", "b@%h", **env):
        wait_for(lambda: kept.state == "SUCCESS", 60, interval=0.5)
        wait_for(lambda: revoked.state == "REVOKED", max(eta - time.time(), 0) + 15)
        time.sleep(1.0)
    keys = [row[0] for row in read_record(record)]
    assert "kept" in keys
    assert key not in keys


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_the_revoke_broadcast_reaches_a_busy_worker(target, pool):
    """kombu's pidbox stamps a broadcast that wants no reply with ``expires: 0``; read as
    1970, it expired at once and the revoke never reached the worker."""
    app = make_app(target)

    @app.task(shared=False)
    def sleeping(seconds):
        time.sleep(seconds)

    with thread_worker(app, pool=pool, concurrency=1):
        sleeping.delay(1)
        victim = app.send_task("x.never", countdown=60)
        victim.revoke()
        assert wait_for(
            lambda: victim.id in sum((app.control.inspect(timeout=1).revoked() or {}).values(), []),
            15,
        )


def test_control_messages_are_served_before_tasks_that_came_with_them(target):
    """A revoke (a no-ack pidbox message) and the task it names, both waiting when the
    worker looks: the control channel is served first, whatever the channels' order, so
    the worker knows of the revoke before it receives the task (Celery's revoke by
    stamped headers is only in the workers' memory)."""
    from kombu import Connection, Consumer, Queue

    seen: list[str] = []
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        tasks, control = conn.channel(), conn.channel()  # the task channel first, as Celery
        Consumer(
            tasks, [Queue("tasks")], callbacks=[lambda b, m: (seen.append(b), m.ack())]
        ).consume()
        Consumer(
            control, [Queue("ctl")], no_ack=True, callbacks=[lambda b, m: seen.append(b)]
        ).consume()
        with conn.Producer() as producer:
            producer.publish("task", routing_key="tasks", declare=[Queue("tasks")])
            producer.publish("revoke", routing_key="ctl", declare=[Queue("ctl")])
        conn.drain_events(timeout=5)  # one look at every consuming channel
        assert seen[:1] == ["revoke"], seen


def test_a_revoke_in_a_long_transaction_holds_back_no_heartbeat(pg_target, tmp_path):
    """A revoke made inside ``kombu_alkstore.transaction(conn)`` (a web request revoking
    a task, then doing more work before it commits) locks no job row: the worker holding
    that task prefetched, and a long task beside it, keep heartbeating (issue 29, defect
    4: the mark was an UPDATE of the job row, the worker's one heartbeat statement for all
    its claims waited on it, the long task's 3 s claim lapsed and it ran twice)."""
    target = pg_target
    record = tmp_path / "record.txt"
    producer = make_app(target, transport_options={"visibility_timeout": 3})
    env = {"ALKSTORE_TEST_ACKS_LATE": "1", "ALKSTORE_TEST_PREFETCH": "2"}
    with (
        target.open() as store,
        worker_process(target, record, "--pool", "threads", "-c", "1", **env),
    ):
        long = producer.send_task("tests.apps.proj.mark", ("long",), {"sleep": 10})
        wait_for(lambda: (j := store.get_job(long.id)) and j.state == "processing", 60)
        behind = producer.send_task("tests.apps.proj.mark", ("behind",))
        # Prefetched: held by the worker (heartbeated with the long one), not running.
        wait_for(lambda: (j := store.get_job(behind.id)) and j.state == "processing", 30)
        with psycopg.connect(target.url) as conn:
            with kombu_alkstore.transaction(conn):
                producer.control.revoke(behind.id)
                time.sleep(7)  # the request goes on: more than twice the claims' timeout
            conn.commit()
        wait_for(lambda: any(r[0] == "long" for r in read_record(record)), 30)
        wait_for(lambda: store.get_job(long.id) is None, 10)  # its ack landed
        time.sleep(2)
    runs = [r[0] for r in read_record(record)]
    # Once. (Whether the revoked one runs is Celery's: a threads pool has taken it already.)
    assert runs.count("long") == 1, runs
