"""Real ``celery beat`` (and ``celery worker``) subprocesses on both engines.

Every subprocess runs in its own session and is killed in ``finally``. The worker's task
records the boundary it was fired for (from the message headers) and when it started.
"""

from __future__ import annotations

import collections
import signal
import time

import pytest

from celery_beat_alkstore import LEASE_NAME, first_boundary, schedule
from celery_beat_alkstore.scheduler import CATCH_UP_LIMIT
from kombu_alkstore.store import ScheduleRow
from tests.beat.beat_helpers import (
    TASK,
    beat_process,
    beat_worker,
    beats,
    every,
    jitter,
    log_text,
    next_at,
    queued_boundaries,
    runs,
)
from tests.helpers import kill_group, wait_for

TTL = 3.0


def _holder(store) -> str | None:
    return store.lease_holder(LEASE_NAME)


def _assert_each_once(boundaries: list[float], first: float, end: float, step: float) -> None:
    """Every grid boundary in ``[first, end)`` appears exactly once, and nothing else."""
    counts = collections.Counter(boundaries)
    dupes = {b: n for b, n in counts.items() if n > 1}
    assert not dupes, f"boundaries fired more than once: {dupes}"
    expected = set()
    b = first
    while b < end:
        expected.add(b)
        b += step
    got = set(counts)
    assert got == expected, (
        f"missing {sorted(expected - got)}, unexpected {sorted(got - expected)} "
        f"(window {first}..{end})"
    )


def test_three_beats_fire_each_boundary_once_and_survive_leader_kill(target, tmp_path):
    """Three beats on ``@every 1s`` for ~15 s; the leader is killed with SIGKILL midway.
    Every boundary from the first fire to the final ``next_at`` fired exactly once."""
    record, store = tmp_path / "record", target.open()
    logs = [tmp_path / f"beat{i}.log" for i in range(3)]
    env = every(1)
    with (
        beat_worker(target, record, tmp_path / "worker.log"),
        beats(target, record, logs, **env) as procs,
    ):
        started = time.time()
        leader = wait_for(lambda: _holder(store), timeout=20)
        wait_for(lambda: runs(record), timeout=20)
        time.sleep(6)
        leader = _holder(store)
        pid = int(leader.split(":")[1])
        victim = next(p for p in procs if p.pid == pid)
        killed_at = time.time()
        kill_group(victim)
        new_leader = wait_for(
            lambda: (h := _holder(store)) and h != leader and h, timeout=TTL + 5, interval=0.05
        )
        takeover = time.time() - killed_at
        time.sleep(max(0.0, started + 15 - time.time()))
        for p in procs:
            kill_group(p)
        end = next_at(store, "tick")
        # Everything committed before the kill is in the queue: let the worker drain it.
        wait_for(lambda: max(b for b, _ in runs(record)) >= end - 1, timeout=15)
        time.sleep(0.5)
    samples = runs(record)
    first_fire = min(b for b, _ in samples)
    _assert_each_once([b for b, _ in samples], first_fire, end, 1.0)
    assert first_fire <= started + 10, "the first boundary fired late"
    assert end - first_fire >= 10, f"only {end - first_fire} boundaries in the window"
    assert takeover <= TTL + 1.5, f"standby took {takeover:.1f}s to take over"
    assert new_leader != leader
    # On-time fires (not the ones caught up after the kill): report the jitter.
    on_time = [(b, s) for b, s in samples if s - b < 1.0]
    p50, p99 = jitter(on_time)
    print(
        f"\n{target.engine}: {len(samples)} runs, takeover {takeover:.2f}s, "
        f"jitter p50 {p50:.1f} ms p99 {p99:.1f} ms"
    )
    assert p50 < 500, f"p50 jitter {p50:.0f} ms"
    store.close()


def test_downtime_replays_missed_boundaries_on_the_grid(target, tmp_path):
    """A 2 s schedule, every beat stopped for 10 s, one restarted: the 5 missed
    boundaries fire (once each) and later ones stay on the original grid."""
    record, store = tmp_path / "record", target.open()
    env = every(2)
    with beat_worker(target, record, tmp_path / "worker.log"):
        with beat_process(target, record, tmp_path / "beat1.log", **env) as beat:
            wait_for(lambda: len(runs(record)) >= 2, timeout=25)
            beat.send_signal(signal.SIGTERM)  # a clean stop: the lease is released
            beat.wait(timeout=15)
        stopped = time.time()
        last = next_at(store, "tick") - 2  # the last boundary fired before the stop
        wait_for(lambda: max(b for b, _ in runs(record)) >= last, timeout=10)
        first = min(b for b, _ in runs(record))
        time.sleep(10)
        restarted = time.time()
        with beat_process(target, record, tmp_path / "beat2.log", **env):
            wait_for(lambda: max(b for b, _ in runs(record)) >= last + 14, timeout=25)
        end = next_at(store, "tick")
        wait_for(lambda: max(b for b, _ in runs(record)) >= end - 2, timeout=10)
    samples = runs(record)
    _assert_each_once([b for b, _ in samples], first, end, 2.0)
    missed = [b for b in range(int(last) + 2, int(stopped + 10) + 1, 2) if b > stopped]
    assert len(missed) == 5, missed
    # Replayed by the restarted beat, not fired on time by the stopped one.
    late = {b for b, s in samples if s >= restarted}
    assert set(missed) <= late, f"missed {missed} were not replayed late: {sorted(late)}"
    assert all((b - first) % 2 == 0 for b, _ in samples), "a boundary left the grid"
    store.close()


def test_more_than_64_missed_boundaries_fire_64_and_skip_the_rest(target, tmp_path):
    record, store = tmp_path / "record", target.open()
    schedule("big", "@every 60s", TASK, store=store)
    grid = first_boundary(60)
    behind = 100
    start = grid - behind * 60  # boundaries start .. grid-60 are due: 100 of them
    store.schedule_upsert(
        ScheduleRow("big", "@every 1m", 60.0, TASK, "[]", "{}", "{}", start, "api"),
        keep_grid=False,
    )
    log = tmp_path / "beat.log"
    with beat_process(target, record, log, ALKSTORE_BEAT_CATCH_UP="replay"):
        wait_for(lambda: "skipped" in log_text(log), timeout=25)
        time.sleep(0.3)
    fired = sorted(queued_boundaries(store, name="big"))
    caught_up, on_time = fired[:CATCH_UP_LIMIT], fired[CATCH_UP_LIMIT:]
    assert caught_up == [start + i * 60 for i in range(CATCH_UP_LIMIT)]
    # The test may straddle the minute: ``grid`` then comes due while the beat runs and
    # fires on time after the catch-up (or, passed before the first tick, is skipped).
    assert on_time in ([], [grid]), on_time
    now_next = next_at(store, "big")
    assert now_next == grid + 60 if on_time else now_next in (grid, grid + 60)
    skipped = (now_next - start) / 60 - CATCH_UP_LIMIT - len(on_time)
    text = log_text(log)
    assert f"fired {CATCH_UP_LIMIT}, skipped {int(skipped)}" in text, text[-2000:]
    store.close()


def test_crash_between_enqueue_and_commit_refires_the_boundary(target, tmp_path):
    record, store = tmp_path / "record", target.open()
    env = every(1)
    log1, log2 = tmp_path / "beat1.log", tmp_path / "beat2.log"
    crashing = "tests.apps.beatproj:CrashingScheduler"
    with beat_process(target, record, log1, crashing, **env) as beat:
        assert beat.wait(timeout=30) == 1
    text = log_text(log1)
    assert "crashing after the enqueue of 'tick' boundary" in text, text[-2000:]
    boundary = float(text.split("crashing after the enqueue of 'tick' boundary ")[1].split(",")[0])
    # Nothing of that tick committed: no job, next_at not advanced.
    assert queued_boundaries(store) == []
    assert next_at(store, "tick") == boundary
    with beat_process(target, record, log2, **env):
        wait_for(lambda: next_at(store, "tick") >= boundary + 3, timeout=TTL + 20)
    fired = queued_boundaries(store, name="tick")
    assert fired.count(boundary) == 1, fired
    end = next_at(store, "tick")
    _assert_each_once(fired, boundary, end, 1.0)
    store.close()


@pytest.mark.parametrize(
    "extra, words",
    [
        (
            {"ALKSTORE_BEAT_SCHEDULE": '{"typo": {"schedule": "cron 61 * * * *", "task": "t"}}'},
            ["ERROR", "'typo'", "cron 61 * * * *", "minute", "expected '@every <n><unit>'"],
        ),
        (
            {"ALKSTORE_BEAT_SCHEDULE": '{"weird": {"schedule": "@every 5x", "task": "t"}}'},
            ["ERROR", "weird", "@every 5x", "'cron <minute> <hour>"],
        ),
    ],
    ids=["cron-typo", "malformed"],
)
def test_bad_entry_is_refused_at_start(target, tmp_path, extra, words):
    record, log = tmp_path / "record", tmp_path / "beat.log"
    env = dict(every(1), **extra) if "ALKSTORE_BEAT_SCHEDULE" not in extra else extra
    with beat_process(target, record, log, **env) as beat:
        rc = beat.wait(timeout=30)
    text = log_text(log)
    assert rc != 0
    lines = [line for line in text.splitlines() if all(w in line for w in words)]
    assert lines, text[-2000:]
    assert "Traceback" not in text
    # Nothing half-started: no schedule was stored.
    store = target.open()
    assert store.schedule_list() == []
    store.close()


def test_schedule_added_through_the_api_is_fired_by_a_running_beat(target, tmp_path):
    record, store = tmp_path / "record", target.open()
    with (
        beat_worker(target, record, tmp_path / "worker.log"),
        beat_process(target, record, tmp_path / "beat.log"),
    ):
        wait_for(lambda: _holder(store), timeout=20)
        time.sleep(1.0)
        added = schedule("added", "@every 1s", TASK, kwargs={"k": 1}, store=store)
        assert added.origin == "api"
        wait_for(lambda: len(runs(record, "added")) >= 2, timeout=10)
    got = runs(record, "added")
    assert got[0][0] == added.next_at
    assert [b for b, _ in got[:2]] == [added.next_at, added.next_at + 1]
    store.close()
