"""Chords over `celery worker` subprocesses, broker and results both alkstore."""

from __future__ import annotations

import contextlib
import json
import signal

import pytest
from celery import chord

from tests.helpers import kill_group, read_record, wait_for, worker_process
from tests.results.apps import result_app

APP = "tests.results.chordproj"


def test_a_worker_killed_mid_chord_leaves_one_callback_with_the_right_result(target, tmp_path):
    """Two prefork workers share a chord of 40 header tasks (late acks); one is killed
    with -9 once some parts ran: its tasks come back after the visibility timeout, the
    survivor runs them, and the callback runs once with every part's result."""
    options = dict(target.transport_options, polling_interval=1.0, visibility_timeout=3)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(options)}
    app = result_app(target, transport_options=options, task_acks_late=True)
    record = tmp_path / "record.tsv"
    log = tmp_path / "workers.log"
    args = ("-P", "prefork", "-c", "2")
    parts = 40
    with (
        worker_process(target, record, *args, "-n", "a@%h", app=APP, log=log, **env) as a,
        worker_process(target, record, *args, "-n", "b@%h", app=APP, log=log, **env),
    ):
        header = [app.signature("chordproj.part", (i, 0.3)) for i in range(parts)]
        res = chord(header)(app.signature("chordproj.total"))
        wait_for(lambda: sum(r[0] == "part" for r in read_record(record)) >= 6, 120)
        kill_group(a, signal.SIGKILL)
        before = read_record(record)
        assert not [r for r in before if r[0] == "callback"]
        assert sum(r[0] == "part" for r in before) < parts, "the kill must be mid-chord"
        assert res.get(timeout=300) == sum(range(parts))
        # Every message is gone (acked), so nothing can still run the callback again.
        store = app.backend.store

        def drained() -> bool:
            return all(c.pending + c.delayed + c.processing == 0 for c in store.counts(["celery"]))

        wait_for(drained, 120)
    rows = read_record(record)
    callbacks = [r for r in rows if r[0] == "callback"]
    assert len(callbacks) == 1, rows
    assert callbacks[0][1:3] == [str(parts), str(sum(range(parts)))]
    assert {int(r[1]) for r in rows if r[0] == "part"} == set(range(parts))
    state = app.backend.tables.chord_state(res.parent.id)
    assert state is not None and state[0] == parts and state[3] is True


@pytest.mark.slow
def test_a_chord_of_1000_on_three_workers_calls_back_once_with_every_result(target, tmp_path):
    options = dict(target.transport_options, polling_interval=1.0)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(options)}
    app = result_app(target, transport_options=options)
    record = tmp_path / "record.tsv"
    log = tmp_path / "workers.log"
    parts = 1000
    with contextlib.ExitStack() as stack:
        for name in ("a", "b", "c"):
            stack.enter_context(
                worker_process(
                    target, record, "-P", "prefork", "-c", "2", "-n", f"{name}@%h",
                    app=APP, log=log, **env,
                )
            )  # fmt: skip
        header = [app.signature("chordproj.part", (i, 0)) for i in range(parts)]
        res = chord(header)(app.signature("chordproj.total"))
        assert res.get(timeout=600) == sum(range(parts))
    rows = read_record(record)
    callbacks = [r for r in rows if r[0] == "callback"]
    assert len(callbacks) == 1
    assert callbacks[0][1:3] == [str(parts), str(sum(range(parts)))]
    pids = {r[2] for r in rows if r[0] == "part"}
    assert len(pids) >= 3, "the header ran on several worker processes"
