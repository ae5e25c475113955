"""A busy worker stops hearing announcements of new jobs, and loses nothing by it
(transport/quiet.py): control messages still reach it, a countdown published meanwhile
runs on time, and once idle it hears (and takes) new work at once."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import make_app, read_record, wait_for, worker_process


def _waiter_statement(target) -> str | None:
    """The last statement of the worker's LISTEN connection (UNLISTEN while quiet)."""
    with psycopg.connect(target.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE query ~ '^(UN)?LISTEN '"
            " AND position(%s in query) > 0 ORDER BY backend_start DESC LIMIT 1",
            (target.schema,),
        ).fetchone()
    return row[0].split()[0] if row else None


def _started(record, key: str) -> float | None:
    rows = [r for r in read_record(record) if r[0] == key]
    return float(rows[0][2]) if rows else None


@pytest.mark.slow
def test_a_busy_worker_goes_quiet_and_loses_nothing(pg_target, tmp_path):
    target, record = pg_target, tmp_path / "record.tsv"
    app = make_app(target)
    with worker_process(target, record, "-P", "threads", "-c", "2", "-n", "quiet@%h"):
        wait_for(lambda: app.control.inspect(timeout=1).ping(), 60)
        for i in range(24):  # 12 s of work for 2 threads, prefetch (8) full until ~8 s
            app.send_task("tests.apps.proj.mark", (f"busy{i}", 1.0))
        wait_for(lambda: _waiter_statement(target) == "UNLISTEN", 10)

        # Quiet: a control message still reaches it (handed to the pidbox's offer), and
        # so does one too long to hand off (found by the idle channels' check).
        ping = {"reply": True, "limit": 1, "timeout": 3}
        assert app.control.broadcast("ping", **ping)
        assert app.control.broadcast("ping", arguments={"pad": "x" * 9000}, **ping)
        assert _waiter_statement(target) == "UNLISTEN"
        due = time.time() + 12.0  # after the backlog
        app.send_task("tests.apps.proj.mark", ("countdown",), countdown=12.0)

        # Idle again: it hears announcements, and takes new work at once.
        wait_for(lambda: len(read_record(record)) >= 24, 30)
        wait_for(lambda: _waiter_statement(target) == "LISTEN", 10)
        sent = time.time()
        app.send_task("tests.apps.proj.mark", ("after",))
        wait_for(lambda: _started(record, "after"), 10)
        assert _started(record, "after") - sent < 1.0
        wait_for(lambda: _started(record, "countdown"), 20)
        assert _started(record, "countdown") - due < 1.0


@pytest.mark.slow
def test_a_quiet_worker_under_long_tasks_fills_a_free_slot(pg_target, tmp_path):
    """acks_late, prefetch 4 on 4 threads, three long tasks: a slot that frees is filled
    within about a second, though no announcement comes and half the slots are not free
    (a busy channel's own trigger), and by the job that waited, not by a newer one."""
    target, record = pg_target, tmp_path / "record.tsv"
    app = make_app(target)
    env = {"ALKSTORE_TEST_PREFETCH": "1", "ALKSTORE_TEST_ACKS_LATE": "1"}
    with worker_process(target, record, "-P", "threads", "-c", "4", "-n", "long@%h", **env):
        wait_for(lambda: app.control.inspect(timeout=1).ping(), 60)
        for i in range(3):
            app.send_task("tests.apps.proj.mark", (f"long{i}", 20.0))
        app.send_task("tests.apps.proj.mark", ("short", 3.0))
        app.send_task("tests.apps.proj.mark", ("backlog",))
        wait_for(lambda: _waiter_statement(target) == "UNLISTEN", 10)
        wait_for(lambda: _started(record, "short"), 10)  # its slot is free now
        sent = time.time()
        app.send_task("tests.apps.proj.mark", ("new",))
        wait_for(lambda: _started(record, "new"), 30)
        assert _started(record, "new") - sent < 3.5
        backlog = _started(record, "backlog")  # the older job, not overtaken by the new
        assert backlog is not None and backlog < _started(record, "new")
