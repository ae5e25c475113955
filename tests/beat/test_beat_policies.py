"""Catch-up policies and no stacking, with real ``celery beat`` (and ``celery worker``)
subprocesses on both engines."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from celery_beat_alkstore import first_boundary, schedule
from celery_beat_alkstore.api import make_row
from tests.beat.beat_helpers import TASK, beat_process, beat_worker, log_text, queued_boundaries
from tests.beat.test_beat_cli import _epoch, cli, ok
from tests.helpers import read_record, wait_for

SLOW = "tests.apps.beatproj.slow"
BEHIND = 100
_NEXT = re.compile(r"schedule 'late' was .* boundaries behind.*; next at (\S+)")


@pytest.mark.parametrize(
    "policy, default, expected",
    [
        ("replay", None, 64),
        ("once", None, 1),
        ("skip", None, 0),
        (None, None, 1),
        (None, "skip", 0),
    ],
    ids=["replay", "once", "skip", "default-is-once", "default-setting-skip"],
)
def test_catch_up_policy_fires_64_1_or_0_of_the_missed_boundaries(
    target, tmp_path, policy, default, expected
):
    """``@every 1s`` put 100 boundaries behind; the beat starts: the jobs published for
    the boundaries before the next future one are 64 (replay), 1 (once) or 0 (skip)."""
    store, log = target.open(), tmp_path / "beat.log"
    row = make_row("late", "@every 1s", TASK, catch_up=policy)
    start = first_boundary(1) - BEHIND
    store.schedule_upsert(replace(row, next_at=start), keep_grid=False)
    env = {"ALKSTORE_BEAT_CATCH_UP": default} if default else {}
    with beat_process(target, tmp_path / "record", log, **env):
        found = wait_for(lambda: _NEXT.search(log_text(log)), timeout=30)
        resumed = _epoch(found.group(1))  # the first boundary after the catch-up tick
        # The line is logged inside the tick's transaction: stop the beat only once that
        # has committed (the advance to `resumed` commits with the jobs it published).
        wait_for(lambda: store.schedule_get("late").next_at >= resumed, timeout=30)
    fired = sorted(b for b in queued_boundaries(store, name="late") if b < resumed)
    assert len(fired) == expected, (fired, log_text(log)[-2000:])
    if policy == "replay":
        assert fired == [start + i for i in range(64)]
    if expected == 1:
        assert fired == [resumed - 1]  # one run, for the latest missed boundary
    row = store.schedule_get("late")
    assert row.run_count >= expected
    store.close()


def _runs(record) -> list[tuple[float, float, float]]:
    """``(boundary, start, end)`` of each recorded run of ``slow``, by start."""
    out = [(float(f[1]), float(f[2]), float(f[3])) for f in read_record(record) if f[0] == "slow"]
    return sorted(out, key=lambda r: r[1])


def _list_json(target) -> dict:
    out = ok(cli("-b", target.broker_url, "--schema", target.schema, "list", "--json"))
    return {s["name"]: s for s in json.loads(out)}


@pytest.mark.parametrize("no_stacking", [True, False], ids=["no-stacking", "stacks"])
def test_no_stacking_runs_a_slow_task_back_to_back(target, tmp_path, no_stacking):
    """A 3 s task on ``@every 1s`` with a real worker (8 threads) and a real beat: with
    no stacking its runs never overlap and follow each other within about a boundary,
    the skipped due times counted in ``list --json``; without, they overlap."""
    store, record = target.open(), tmp_path / "record"
    schedule("slow", "@every 1s", SLOW, kwargs={"seconds": 3}, no_stacking=no_stacking, store=store)
    with (
        beat_worker(target, record, tmp_path / "worker.log"),
        beat_process(target, record, tmp_path / "beat.log"),
    ):
        wait_for(lambda: len(_runs(record)) >= 4, timeout=60)
        listed = _list_json(target)["slow"]
    runs = _runs(record)
    overlaps = [(a, b) for a, b in zip(runs, runs[1:], strict=False) if b[1] < a[2] - 0.05]
    if not no_stacking:
        assert overlaps, runs  # the control: the same task stacks without the option
        assert listed["no_stacking"] is False and listed["skipped"] == 0
        store.close()
        return
    assert not overlaps, f"runs overlapped: {overlaps}"
    gaps = [b[1] - a[2] for a, b in zip(runs, runs[1:], strict=False)]
    assert max(gaps) < 2.5, f"not back to back: gaps {gaps}"
    assert listed["no_stacking"] is True
    assert listed["skipped"] >= len(runs), listed
    assert len({b for b, _, _ in runs}) == len(runs), "a boundary ran twice"
    store.close()
