"""A slow maintenance round never holds back the lease holder's heartbeats.

Issue 29, defect 3: the round travelled on the holder's pipelined claims connection,
answered in send order, ahead of its heartbeats, claims and acks. A round waiting on a row
lock (or expiring 50,000 jobs, or scanning 500,000 dead letters) made every claim the
holder had lapse: a 12 s task with a 3 s producer timeout ran 2-3 times. Rounds now run
from the housekeeping thread on a pooled connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import psycopg
import pytest
from kombu import Connection

import kombu_alkstore  # noqa: F401
from tests.helpers import make_app, options_env, read_record, wait_for, worker_process

pytestmark = pytest.mark.timeout(180)


def test_a_round_waiting_on_a_row_lock_lets_a_long_task_run_once(pg_target, tmp_path):
    target = pg_target
    record = tmp_path / "record.txt"
    producer = make_app(target, transport_options={"visibility_timeout": 3})
    release = threading.Event()
    locked = threading.Event()

    def hold_lock() -> None:
        with psycopg.connect(target.url) as conn:
            sql = f'SELECT id FROM "{target.schema}".jobs WHERE queue = %s FOR UPDATE'
            conn.execute(sql, ["parked"])
            locked.set()
            release.wait(40)
            conn.rollback()

    holder = threading.Thread(target=hold_lock, daemon=True)
    env = {**options_env(sweep_interval=1), "ALKSTORE_TEST_ACKS_LATE": "1"}
    with target.open() as store:
        try:
            log = tmp_path / "worker.log"
            with worker_process(target, record, "--pool", "threads", "-c", "2", log=log, **env):
                task = producer.send_task("tests.apps.proj.mark", ("long",), {"sleep": 10})
                wait_for(lambda: (j := store.get_job(task.id)) and j.state == "processing", 60)
                # A job the next round's expiry must delete, row-locked by another session:
                # the round waits on it for 8 s, more than twice the task's timeout.
                store.enqueue("parked", b"{}", expires_at=time.time() + 0.2)
                time.sleep(0.5)
                holder.start()
                assert locked.wait(10)
                time.sleep(8)
                release.set()
                wait_for(lambda: any(r[0] == "long" for r in read_record(record)), 30)
                # Its ack landed: the claim never lapsed, nothing claimed it again.
                wait_for(lambda: store.get_job(task.id) is None, 10)
                time.sleep(3)
                runs = [r for r in read_record(record) if r[0] == "long"]
        finally:
            release.set()
            if holder.is_alive():
                holder.join(10)
    assert len(runs) == 1, runs


def test_a_round_cancelled_by_statement_timeout_is_logged_each_time(pg_target, caplog):
    """A round the database cancels (``statement_timeout`` from the URL, here while it
    waits on a row lock) is a warning naming the error, every round: expiry, retention
    and queue drops never stop silently (issue 29, defect 9a)."""
    target = pg_target
    with target.open() as store:
        store.enqueue("parked", b"{}", expires_at=time.time() + 0.2)
    time.sleep(0.5)
    url = f"{target.broker_url}?options=-c%20statement_timeout%3D300"
    options = {**target.transport_options, "sweep_interval": 1}
    with psycopg.connect(target.url) as locker:
        locker.execute(
            f'SELECT id FROM "{target.schema}".jobs WHERE queue = %s FOR UPDATE', ["parked"]
        )
        with (
            caplog.at_level(logging.WARNING, logger="kombu_alkstore"),
            Connection(url, transport_options=options) as conn,
        ):
            queue = conn.SimpleQueue("idle")
            with contextlib.suppress(queue.Empty):
                queue.get(timeout=3.5)
            queue.close()
        locker.rollback()
    failed = [r for r in caplog.records if "maintenance round failed" in r.getMessage()]
    assert len(failed) >= 2, [r.getMessage() for r in caplog.records]
    assert "QueryCanceled" in failed[0].getMessage()
