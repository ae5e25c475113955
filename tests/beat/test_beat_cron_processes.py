"""Real ``celery beat`` / ``celery worker -B`` subprocesses with crontab schedules.

Every subprocess runs in its own session and is killed in ``finally``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import subprocess
import sys
import time

from celery_beat_alkstore import LEASE_NAME
from tests.beat.beat_helpers import APP, beats, every, log_text, queued_boundaries, runs
from tests.helpers import ROOT, kill_group, proc_env, wait_for, worker_process

TTL = 3.0


def _once_each(fired: list[float], expected: list[float], what: str) -> None:
    dupes = {b: n for b, n in collections.Counter(fired).items() if n > 1}
    assert not dupes, f"{what}: boundaries fired more than once: {dupes}"
    assert sorted(fired) == expected, (
        f"{what}: missing {sorted(set(expected) - set(fired))}, "
        f"unexpected {sorted(set(fired) - set(expected))}"
    )


def _queued_by_schedule(store) -> dict[str, list[float]]:
    """Claim every queued job: the boundaries their headers carry, by schedule."""
    found: dict[str, list[float]] = collections.defaultdict(list)
    while batch := store.claim(["celery"], limit=100):
        for d in batch:
            headers = json.loads(bytes(d.body))["headers"]
            found[headers["alkstore_schedule"]].append(headers["alkstore_boundary"])
        store.ack(batch)
    return found


def test_three_beats_crontab_and_every_leader_killed_before_a_cron_boundary(
    pg_target, sqlite_target, tmp_path
):
    """Three beats, a ``crontab(minute="*")`` in Australia/Lord_Howe (a half-hour zone) and
    ``@every 1s``; the lease holder is killed with SIGKILL 1.5 s before a minute boundary,
    so that boundary falls in the failover. Every boundary of both fired exactly once.
    Both engines at once, each with its own three beats: the wait for a minute boundary
    (up to a minute) is spent once."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(_leader_killed_before_a_cron_boundary, t, tmp_path / t.engine)
            for t in (pg_target, sqlite_target)
        ]
        for run in runs:  # each ran to its end, its beats killed, whatever the other did
            run.result()


def _leader_killed_before_a_cron_boundary(target, tmp_path) -> None:
    tmp_path.mkdir()
    record, store = tmp_path / "record", target.open()
    logs = [tmp_path / f"beat{i}.log" for i in range(3)]
    env = dict(
        every(1), ALKSTORE_BEAT_CRONTAB="minutely", ALKSTORE_BEAT_TIMEZONE="Australia/Lord_Howe"
    )
    with beats(target, record, logs, **env) as procs:
        leader = wait_for(lambda: store.lease_holder(LEASE_NAME), timeout=30)
        wait_for(lambda: "minutely" in {r.name for r in store.schedule_list()}, timeout=10)
        cron_boundary = store.schedule_get("minutely").next_at
        if cron_boundary - store.schedule_clock() < 6:
            cron_boundary += 60  # leave the beats time to settle before the kill
        time.sleep(max(0.0, cron_boundary - 1.5 - store.schedule_clock()))
        leader = store.lease_holder(LEASE_NAME)
        victim = next(p for p in procs if p.pid == int(leader.split(":")[1]))
        kill_group(victim)
        killed_at = store.schedule_clock()
        wait_for(lambda: (h := store.lease_holder(LEASE_NAME)) and h != leader, timeout=TTL + 5)
        takeover = store.schedule_clock() - killed_at
        wait_for(lambda: store.schedule_get("minutely").next_at > cron_boundary, timeout=10)
        time.sleep(2.0)
        for p in procs:
            kill_group(p)
    tick = store.schedule_get("tick").next_at
    minutely = store.schedule_get("minutely")
    fired = _queued_by_schedule(store)
    fired_every, fired_cron = fired["tick"], fired["minutely"]
    first = min(fired_every)
    _once_each(fired_every, [first + i for i in range(int(tick - first))], "@every 1s")
    first_cron = min(fired_cron)
    expected = [first_cron + 60 * i for i in range(int((minutely.next_at - first_cron) // 60))]
    _once_each(fired_cron, expected, "crontab")
    assert cron_boundary in fired_cron and minutely.next_at == cron_boundary + 60
    assert minutely.run_count == len(fired_cron) and minutely.tz == "Australia/Lord_Howe"
    text = log_text(*logs)
    print(
        f"\n{target.engine}: {len(fired_every)} @every and {len(fired_cron)} crontab "
        f"boundaries, each once; leader killed {cron_boundary - killed_at:.1f}s before a "
        f"cron boundary, takeover {takeover:.2f}s"
    )
    assert "Traceback" not in text
    store.close()


def _run(args: list[str], target, record, log, **env: str) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", APP, *args, "--loglevel=INFO"],
            env=proc_env(target, record, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    finally:
        out.close()


def test_plain_celery_beat_with_the_beat_scheduler_setting(target, tmp_path):
    record, log, store = tmp_path / "record", tmp_path / "beat.log", target.open()
    proc = _run(["beat"], target, record, log, ALKSTORE_BEAT_SCHEDULER="alkstore", **every(1))
    try:
        wait_for(lambda: store.lease_holder(LEASE_NAME), timeout=30)
        wait_for(lambda: len(queued_boundaries(store, name="tick")) >= 1, timeout=15)
        assert proc.poll() is None
    finally:
        kill_group(proc)
    text = log_text(log)
    assert "celery_beat_alkstore.scheduler.Scheduler" in text and "Traceback" not in text
    store.close()


def test_celery_worker_dash_b_with_the_beat_scheduler_setting(target, tmp_path):
    """``celery worker -B`` reads ``beat_scheduler``; its ``-S`` is ``--statedb``."""
    record, log = tmp_path / "record", tmp_path / "worker.log"
    statedb = tmp_path / "worker.state"
    env = dict(every(1), ALKSTORE_BEAT_SCHEDULER="alkstore")
    with worker_process(
        target,
        record,
        "-B",
        "-P",
        "threads",
        "-c",
        "2",
        "-S",
        str(statedb),
        app=APP,
        log=log,
        **env,
    ):
        wait_for(lambda: len(runs(record)) >= 2, timeout=40)
    text = log_text(log)
    assert "Traceback" not in text and "AttributeError" not in text
    assert any(statedb.parent.glob("worker.state*")), "-S is the worker's state db"
    assert [b for b, _ in runs(record)][:2] == sorted({b for b, _ in runs(record)})[:2]
