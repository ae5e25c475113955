"""Acts on record with real processes: a ``celery worker`` subprocess consumes a queue an
operator pauses, resumes and redrives with ``python -m kombu_alkstore`` subprocesses; each
act is on record with the change it made (the worker saw the pause, ran the redriven
tasks), and the record refuses to be altered."""

from __future__ import annotations

import json
import time

import pytest
from celery import Celery

from tests.cli.conftest import run_module
from tests.helpers import read_record, run_sql, wait_for, worker_process


def _app(target) -> Celery:
    app = Celery("acts_process", broker=target.broker_url, set_as_current=False)
    app.conf.broker_transport_options = target.transport_options
    return app


def test_a_worker_sees_each_act_and_each_act_is_on_record(target, tmp_path):
    base = ["-b", target.broker_url, "--schema", target.schema]
    record = tmp_path / "record.txt"
    app = _app(target)
    store = target.open()
    try:
        with worker_process(
            target, record, "-P", "solo", "-Q", "work", ALKSTORE_TEST_ACKS_LATE="1"
        ):
            app.send_task("tests.apps.proj.mark", ("warm-up",), queue="work")
            wait_for(lambda: any(r[0] == "warm-up" for r in read_record(record)), 60)

            r = run_module(*base, "queue", "pause", "work", "--by", "ops:ana", "--reason", "deploy")
            assert r.code == 0, r.err
            for i in range(3):
                app.send_task("tests.apps.proj.mark", (f"held-{i}",), queue="work")
            time.sleep(1.5)  # the worker holds off while the queue is paused
            assert not [r for r in read_record(record) if r[0].startswith("held-")]
            r = run_module(*base, "queue", "resume", "work", "--by", "ops:ana")
            assert r.code == 0, r.err
            wait_for(
                lambda: len([r for r in read_record(record) if r[0].startswith("held-")]) == 3, 30
            )

            # Two tasks the worker rejects: dead letters; redriven by an operator, the
            # worker runs them again (and rejects them again).
            for key in ("r1", "r2"):
                app.send_task("tests.apps.proj.reject_me", (key,), queue="work")
            wait_for(lambda: store.counts(["work"])[0].dead == 2, 30)
            dead_ids = sorted(j.id for j in store.dead_list("work"))
            r = run_module(*base, "dead", "requeue", "--queue", "work", "--reason", "INC-1")
            assert r.code == 0 and "requeued 2" in r.out, r.err
            wait_for(lambda: len([r for r in read_record(record) if r[0] == "reject"]) == 4, 30)
            wait_for(lambda: store.counts(["work"])[0].dead == 2, 30)
            r = run_module(*base, "dead", "purge", "--queue", "work", "-f", "--by", "ops:bo")
            assert r.code == 0 and "purged 2" in r.out, r.err
            # a second purge changes nothing: no act
            assert run_module(*base, "dead", "purge", "--queue", "work", "-f").code == 0

        r = run_module(*base, "acts", "--json")
        assert r.code == 0, r.err
        acts = json.loads(r.out)
        assert [(a["act"], a["by"], a["reason"], a["count"]) for a in acts] == [
            ("dead_purge", "ops:bo", None, 2),
            ("dead_requeue", acts[1]["by"], "INC-1", 2),
            ("queue_resume", "ops:ana", None, None),
            ("queue_pause", "ops:ana", "deploy", None),
        ]
        assert acts[1]["by"] and acts[1]["ids"] == dead_ids  # the OS user; same ids
        assert all(a["queue"] == "work" for a in acts)
        assert "r1" not in r.out and "reject_me" not in r.out  # no task content kept

        table = store.names["acts"]  # as written in SQL
        for sql in (f"UPDATE {table} SET reason = 'nothing happened'", f"DELETE FROM {table}"):
            with pytest.raises(Exception, match="append-only"):
                run_sql(target, sql)
        assert len(store.acts()) == 4
    finally:
        store.close()
        app.close()
