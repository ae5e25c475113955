"""The Scheduler in-process (ticks called directly), on both engines."""

from __future__ import annotations

import threading
import time

import pytest
from celery import Celery
from kombu import Connection

from celery_beat_alkstore import LEASE_NAME, Scheduler, first_boundary, schedule, store_target
from celery_beat_alkstore.scheduler import CATCH_UP_LIMIT
from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import ScheduleRow
from tests.beat.beat_helpers import TASK, next_at, queued_boundaries
from tests.helpers import make_app


def _entry(seconds, **extra):
    return {"schedule": seconds, "task": TASK, **extra}


def _app(target, schedule_=None, **conf):
    conf.setdefault("beat_alkstore_lease_ttl", 30)
    conf.setdefault("beat_max_loop_interval", 5)
    conf.setdefault("beat_alkstore_catch_up", "replay")  # these tests replay each boundary
    return make_app(target, beat_schedule=schedule_ or {}, **conf)


def _behind(store, name, interval, count, task=TASK, options="{}"):
    """Put ``name`` ``count`` boundaries behind (its ``next_at`` in the past, on the grid)."""
    start = first_boundary(interval) - count * interval
    store.schedule_upsert(
        ScheduleRow(
            name, f"@every {interval}s", float(interval), task, "[]", "{}", options, start, "api"
        ),
        keep_grid=False,
    )
    return start


@pytest.fixture
def store(target):
    s = target.open()
    yield s
    s.close()


def test_config_is_upserted_vanished_entries_removed_api_entries_kept(target, store):
    s1 = Scheduler(app=_app(target, {"a": _entry(5), "b": _entry(10, args=[1])}))
    rows = {r.name: r for r in store.schedule_list()}
    assert rows["a"].origin == rows["b"].origin == "config"
    assert rows["a"].spec == "@every 5s" and rows["b"].args == "[1]"
    assert rows["a"].next_at % 5 == 0 and rows["a"].next_at > time.time()
    schedule("c", "@every 1m", TASK, store=store)
    s1.close()
    a_next = next_at(store, "a")
    time.sleep(0.01)
    s2 = Scheduler(app=_app(target, {"a": _entry(5, kwargs={"x": 1})}))
    rows = {r.name: r for r in store.schedule_list()}
    assert "b" not in rows
    assert rows["c"].origin == "api"
    assert rows["a"].next_at == a_next, "the grid must survive a restart"
    assert rows["a"].kwargs == '{"x": 1}'
    s2.close()
    s3 = Scheduler(app=_app(target, {"a": _entry(7)}))
    assert next_at(store, "a") % 7 == 0, "a new interval starts a new grid"
    s3.close()


def test_only_the_lease_holder_fires(target, store):
    app = _app(target, {"tick": _entry(1)})
    a, b = Scheduler(app=app), Scheduler(app=app)
    try:
        start = _behind(store, "tick", 1, 3)
        a.tick()
        assert a.leader and store.lease_holder(LEASE_NAME) == a.owner
        pause = b.tick()
        assert not b.leader and 0 < pause <= 30 / 4
        fired = queued_boundaries(store)
        assert sorted(fired)[:3] == [start, start + 1, start + 2]
        assert len(fired) == len(set(fired))
    finally:
        a.close()
        b.close()
    # A clean close releases the lease: the standby takes over at once.
    assert store.lease_holder(LEASE_NAME) is None


def test_losing_the_lease_stops_ticking_before_the_next_fire(target, store):
    app = _app(target, {"tick": _entry(1)})
    a = Scheduler(app=app)
    try:
        a.tick()
        assert a.leader
        queued_boundaries(store)
        _behind(store, "tick", 1, 5)
        store.lease_release(LEASE_NAME, a.owner)
        assert store.lease_acquire(LEASE_NAME, "thief", 30)
        a.tick()
        assert not a.leader
        assert queued_boundaries(store) == []
    finally:
        a.close()
    assert store.lease_holder(LEASE_NAME) == "thief"


def test_row_lock_defeats_a_rogue_ticker(target, store, monkeypatch):
    """Two schedulers that both believe they lead (the lease bypassed) tick at once:
    the row lock and the guarded advance still fire each boundary once."""
    app = _app(target, {"tick": _entry(1)})
    a, b = Scheduler(app=app), Scheduler(app=app)
    for s in (a, b):
        s.leader = True
    monkeypatch.setattr(type(a.store), "lease_acquire", lambda *args, **kw: True)
    try:
        fired = []
        for _ in range(5):
            _behind(store, "tick", 1, 40)
            go = threading.Barrier(2)

            def run(s, go=go):
                go.wait()
                s.tick()

            threads = [threading.Thread(target=run, args=(s,)) for s in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            got = queued_boundaries(store, name="tick")
            assert len(got) == len(set(got)), "a boundary fired twice"
            assert len(got) >= 40
            fired += got
    finally:
        a.close()
        b.close()


def test_tick_sleeps_until_the_nearest_boundary(target, store):
    app = _app(target, {"slow": _entry(3600)}, beat_max_loop_interval=300)
    s = Scheduler(app=app)
    try:
        assert s.tick() <= 10  # renewing the 30 s lease every third of it
        soon = time.time() + 1.5
        store.schedule_upsert(
            ScheduleRow("soon", "@every 1h", 3600.0, TASK, "[]", "{}", "{}", soon, "api"),
            keep_grid=False,
        )
        pause = s.tick()
        assert 1.0 < pause <= soon - time.time() + 0.01
        time.sleep(pause)
        s.tick()
        assert queued_boundaries(store, name="soon") == [soon]
    finally:
        s.close()


def test_a_failing_fire_rolls_back_and_the_others_still_fire(target, store, monkeypatch):
    app = _app(target, {"good": _entry(1), "bad": _entry(1)})
    s = Scheduler(app=app)
    publish = Scheduler._publish

    def flaky(self, row, boundary, producer):
        if row.name == "bad":
            raise RuntimeError("boom")
        return publish(self, row, boundary, producer)

    monkeypatch.setattr(Scheduler, "_publish", flaky)
    try:
        bad_start = _behind(store, "bad", 1, 2)
        good_start = _behind(store, "good", 1, 2)
        s.tick()  # 'bad' rolled back alone; 'good' fired in the same tick
        good = queued_boundaries(store, name="good")
        assert good[:2] == [good_start, good_start + 1]
        assert next_at(store, "bad") == bad_start
        row = store.schedule_get("bad")
        assert row.last_error == "RuntimeError: boom" and row.run_count == 0
    finally:
        s.close()


def test_catch_up_is_capped_per_tick(target, store):
    s = Scheduler(app=_app(target, {"tick": _entry(1)}))
    try:
        start = _behind(store, "tick", 1, 200)
        ticked = time.time()
        s.tick()
        fired = queued_boundaries(store, name="tick")
        assert sorted(fired) == [start + i for i in range(CATCH_UP_LIMIT)]
        assert next_at(store, "tick") > ticked
    finally:
        s.close()


def test_store_is_the_brokers_with_its_schema(target):
    app = _app(target)
    t = store_target(app)
    assert t.same_database and t.options.schema == target.schema
    assert t.url.engine == target.engine


def test_other_broker_uses_beat_alkstore_url_publish_then_commit(target, store):
    app = Celery("foreign", broker="memory://", set_as_current=False)
    app.conf.update(
        beat_alkstore_url=target.url,
        beat_alkstore_options={"schema": target.schema},
        beat_schedule={"m": _entry(1, options={"priority": 5})},
        beat_alkstore_lease_ttl=30,
        beat_alkstore_catch_up="replay",  # each missed boundary fires
    )
    t = store_target(app)
    assert not t.same_database and t.options.schema == target.schema
    s = Scheduler(app=app)
    try:
        start = _behind(store, "m", 1, 2, options='{"priority": 5}')
        ticked = time.time()
        s.tick()
        got = []
        with Connection("memory://") as conn:
            q = conn.SimpleQueue("celery", no_ack=True)
            while True:
                try:
                    got.append(q.get(timeout=0.2))
                except q.Empty:
                    break
            q.close()
        boundaries = [m.headers["alkstore_boundary"] for m in got]
        assert boundaries[:2] == [start, start + 1]
        assert got[0].properties["priority"] == 5
        assert next_at(store, "m") > ticked
    finally:
        s.close()


def test_other_broker_without_beat_alkstore_url_is_refused():
    app = Celery("foreign", broker="memory://", set_as_current=False)
    with pytest.raises(ConfigurationError, match="beat_alkstore_url"):
        store_target(app)
    with pytest.raises(SystemExit, match="beat_alkstore_url"):
        Scheduler(app=app)
    Scheduler(app=app, lazy=True)  # the banner's introspection instance never fails


@pytest.mark.parametrize(
    "entry, words",
    [
        (_entry(0.5), ["'half'", "whole number"]),
        ({"schedule": 5}, ["'half'", "task"]),
        (_entry(5, options={"priority": 999}), ["'half'", "priority"]),
        (_entry(5, args="notalist"), ["'half'", "args"]),
    ],
)
def test_bad_config_entries_are_refused_naming_them(target, entry, words):
    with pytest.raises(SystemExit) as info:
        Scheduler(app=_app(target, {"half": entry}))
    for w in words:
        assert w in str(info.value)


def test_bad_lease_ttl_is_refused(target):
    with pytest.raises(SystemExit, match="beat_alkstore_lease_ttl"):
        Scheduler(app=_app(target, beat_alkstore_lease_ttl="soon"))
