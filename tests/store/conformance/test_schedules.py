"""Schedules: upsert, list, delete, and the guarded tick."""

from __future__ import annotations

import time

import pytest

from tests.store.conformance.helpers import _sched


def test_schedules_upsert_list_delete(store):
    assert store.schedule_list() == []
    store.schedule_upsert(_sched("b", 10, 1000.0))
    store.schedule_upsert(_sched("a", 5, 500.0, origin="api"))
    assert [r.name for r in store.schedule_list()] == ["a", "b"]
    assert store.schedule_list()[1] == _sched("b", 10, 1000.0)
    # keep_grid: same interval keeps the stored boundary, the rest is updated.
    store.schedule_upsert(_sched("b", 10, 2000.0, task="proj.tasks.mul", args="[3]"))
    b = {r.name: r for r in store.schedule_list()}["b"]
    assert (b.next_at, b.task, b.args) == (1000.0, "proj.tasks.mul", "[3]")
    # A changed interval takes the new boundary.
    store.schedule_upsert(_sched("b", 20, 3000.0))
    b = {r.name: r for r in store.schedule_list()}["b"]
    assert (b.interval, b.next_at) == (20, 3000.0)
    # keep_grid=False always takes the given boundary.
    store.schedule_upsert(_sched("b", 20, 4000.0), keep_grid=False)
    assert {r.name: r for r in store.schedule_list()}["b"].next_at == 4000.0
    assert store.schedule_delete("a")
    assert not store.schedule_delete("a")
    assert [r.name for r in store.schedule_list()] == ["b"]


def test_schedule_tick_due_and_guarded_advance(store):
    now = time.time()
    store.schedule_upsert(_sched("due", 10, now - 5))
    store.schedule_upsert(_sched("due2", 10, now - 50))
    store.schedule_upsert(_sched("future", 10, now + 1000))
    with store.schedule_tick() as tick:
        due = tick.due(now)
        assert [r.name for r in due] == ["due2", "due"]  # by next_at
        assert tick.advance("due", now - 5, now + 5)
        assert not tick.advance("due2", now - 999, now + 5)  # wrong prev: refused
        store.enqueue("beat", b"fired")  # commits with the tick
    rows = {r.name: r for r in store.schedule_list()}
    assert rows["due"].next_at == pytest.approx(now + 5)
    assert rows["due2"].next_at == pytest.approx(now - 50)
    with store.schedule_tick() as tick:
        assert not tick.advance("due", now - 5, now + 15)  # already advanced
        assert [r.name for r in tick.due(now)] == ["due2"]
    assert store.counts(["beat"])[0].pending == 1


def test_schedule_tick_rolls_back_with_its_enqueues(store):
    now = time.time()
    store.schedule_upsert(_sched("s", 10, now - 1))
    with pytest.raises(RuntimeError), store.schedule_tick() as tick:
        assert tick.advance("s", now - 1, now + 9)
        store.enqueue("beat", b"fired")
        raise RuntimeError("crash mid-tick")
    assert store.schedule_list()[0].next_at == pytest.approx(now - 1)
    assert store.counts(["beat"])[0].pending == 0
