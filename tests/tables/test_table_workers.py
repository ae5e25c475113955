"""Table queues with real ``celery worker`` subprocesses, on every engine: the service's
table made by its own DDL, rows inserted by plain SQL in the service's transaction."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT, kill_group, proc_env, read_record, wait_for, worker_process
from tests.tables.tablekit import insert, make_table, quoted, rows, service_tx, spec_for

#: The safety-net poll of these workers: long, so a wake-up is told from a poll.
POLL = 30.0


def _env(target, poll: float = POLL, **spec) -> dict[str, str]:
    options = {
        "schema": target.schema,
        "polling_interval": poll,
        "tables": {"emails": spec_for(target, **spec)},
    }
    return {"ALKSTORE_TEST_OPTIONS": json.dumps(options), "ALKSTORE_TEST_ACKS_LATE": "1"}


def install_wake_trigger(target) -> None:
    """PostgreSQL: the trigger docs/tables.md gives, waking idle workers at commit."""
    if target.engine != "postgresql":
        return  # SQLite: every commit to the file wakes them (PRAGMA data_version)
    fn = f'"{target.schema}".email_jobs_wake'
    with service_tx(target) as run:
        run(
            f"""CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              PERFORM pg_notify('alkstore_{target.schema}',
                                json_build_array(NULL::float8, 'emails')::text);
              RETURN NULL;
            END $$"""
        )
        run(
            f"CREATE TRIGGER email_jobs_wake AFTER INSERT ON {quoted(target)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()"
        )


@pytest.fixture
def table(store, target):
    make_table(target)
    return target


def _keys(record) -> list[str]:
    return [r[0] for r in read_record(record)]


def _ready(proc, log) -> None:
    wait_for(lambda: b"ready" in log.read_bytes() if log.exists() else False, 60, 0.2)
    assert proc.poll() is None


def test_inserts_run_as_tasks_woken_at_commit_and_a_rollback_runs_none(table, tmp_path):
    install_wake_trigger(table)
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(table)
    with worker_process(table, record, "-Q", "emails", "-c", "2", log=log, **env) as proc:
        _ready(proc, log)
        time.sleep(1.0)  # idle: the first claims found nothing
        # The service's transaction: a business write and the job, then a rollback.
        with pytest.raises(RuntimeError), service_tx(table) as run:
            run(f"INSERT INTO {quoted(table)} (body) VALUES (?)", (json.dumps({"key": "rb"}),))
            raise RuntimeError("the business write failed")
        started = time.monotonic()
        with service_tx(table) as run:
            run(f"INSERT INTO {quoted(table)} (body) VALUES (?)", (json.dumps({"key": "ok"}),))
        wait_for(lambda: "ok" in _keys(record), 20, 0.05)
        woke = time.monotonic() - started
        assert woke < POLL / 3, f"ran after {woke:.1f} s: the insert did not wake the worker"
        wait_for(lambda: rows(table)[0][2], 10)  # marked processed
    assert _keys(record) == ["ok"]  # the rolled-back row never ran
    assert [r[1:4] for r in rows(table)] == [(1, True, False)]


def test_row_mode_delivers_the_columns(table, tmp_path):
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(table, poll=1.0, mode="row", task="tests.apps.proj.mark_row")
    insert(table, None, recipient="ann@example.com")
    with worker_process(table, record, "-Q", "emails", "-c", "1", log=log, **env):
        wait_for(lambda: _keys(record), 40, 0.1)
    assert _keys(record) == ["row:1:ann@example.com"]


def test_a_worker_killed_mid_row_runs_it_again_after_its_lease(table, tmp_path):
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(table, poll=1.0, visibility_timeout=3)
    insert(table, json.dumps({"key": "slow", "sleep": 3}))
    with worker_process(table, record, "-Q", "emails", "-c", "1", log=log, **env) as first:
        wait_for(lambda: rows(table)[0][3], 40, 0.1)  # claimed: its task is running
        kill_group(first, signal.SIGKILL)
    assert _keys(record) == []
    assert [r[1:4] for r in rows(table)] == [(1, False, True)]
    with worker_process(table, record, "-Q", "emails", "-c", "1", log=log, **env):
        wait_for(lambda: rows(table)[0][2], 40, 0.2)
    assert _keys(record) == ["slow"]
    assert [r[1:4] for r in rows(table)] == [(2, True, False)]


def test_a_poison_row_is_dead_lettered_after_its_attempts(table, tmp_path):
    make_table(table, "email_jobs_dead")
    dead = f"{table.schema}.email_jobs_dead" if table.engine == "postgresql" else "email_jobs_dead"
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(
        table,
        poll=1.0,
        task="tests.apps.proj.suicide",
        max_attempts=2,
        dead={"table": dead},
    )
    insert(table, json.dumps({"key": "poison"}))  # its task kills the worker's process
    with worker_process(table, record, "-Q", "emails", "-c", "1", "-P", "prefork", log=log, **env):
        wait_for(lambda: rows(table, "email_jobs_dead"), 90, 0.5)
    suicides = [r for r in read_record(record) if r[0] == "suicide" and r[1] == "poison"]
    assert len(suicides) == 2
    assert [r[:2] for r in rows(table, "email_jobs_dead")] == [(1, 2)]  # moved, 2 attempts
    assert rows(table) == []


def test_a_mismatched_mapping_is_refused_naming_the_column(table, tmp_path):
    columns = dict(spec_for(table)["columns"], attempt="tries")
    env = proc_env(table, tmp_path / "record.tsv", **_env(table, columns=columns))
    proc = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.proj", "worker", "-Q", "emails"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    line = "column 'tries' (role attempt) is not in the table"
    assert line in proc.stdout + proc.stderr, proc.stderr[-2000:]


def test_a_rejected_row_is_retried_with_backoff_then_dead(table, tmp_path):
    """Each rejection delays the row; the worker hears when it falls due (PostgreSQL:
    the delay's notification; SQLite: the commit) well before its safety poll."""
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(table, task="tests.apps.proj.reject_me", backoff_base=0.3)
    insert(table, json.dumps({"key": "r"}))
    with worker_process(table, record, "-Q", "emails", "-c", "1", log=log, **env):
        wait_for(lambda: len(read_record(record)) == 3 and not rows(table)[0][3], POLL / 2, 0.1)
        time.sleep(1.0)
    assert [r[:2] for r in read_record(record)] == [["reject", "r"]] * 3
    assert [r[1:4] for r in rows(table)] == [(3, False, False)]  # spent, left in place


def test_heartbeats_keep_a_row_longer_than_its_lease(table, tmp_path):
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    env = _env(table, poll=0.5, visibility_timeout=2)  # beats every 2/3 s
    insert(table, json.dumps({"key": "long", "sleep": 6}))  # three leases long
    with worker_process(table, record, "-Q", "emails", "-c", "2", log=log, **env):
        wait_for(lambda: rows(table)[0][2], 40, 0.2)
        time.sleep(1.0)
    assert _keys(record) == ["long"]
    assert [r[1:4] for r in rows(table)] == [(1, True, False)]


def test_an_undecodable_payload_fails_its_attempts_and_runs_nothing(table, tmp_path):
    record, log = tmp_path / "record.tsv", tmp_path / "worker.log"
    columns = dict(spec_for(table)["columns"], payload="recipient")  # a text column
    env = _env(table, poll=0.5, columns=columns, backoff_base=0.2)
    insert(table, None, recipient="{not json")
    insert(table, None, recipient='{"key": "good"}')
    with worker_process(table, record, "-Q", "emails", "-c", "1", log=log, **env):
        wait_for(lambda: rows(table)[0][1] == 3 and not rows(table)[0][3], 40, 0.2)
        wait_for(lambda: rows(table)[1][2], 20, 0.2)
    assert _keys(record) == ["good"]
    assert [r[1:4] for r in rows(table)] == [(3, False, False), (1, True, False)]
    assert b"the payload column is not JSON" in log.read_bytes()
