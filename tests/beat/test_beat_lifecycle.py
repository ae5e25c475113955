"""Cron schedules, the database clock, failure isolation and the schedule lifecycle, with
the Scheduler in-process (ticks called directly) on both engines."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

import pytest
from celery import Celery
from celery.schedules import crontab
from kombu import Connection

from celery_beat_alkstore import Scheduler, disable, enable, parse_spec, run_now, schedule
from celery_beat_alkstore.spec import GRAMMAR
from kombu_alkstore.errors import ConfigurationError, SchemaMissing
from kombu_alkstore.store import ScheduleRow
from kombu_alkstore.store.schema import SCHEMA_VERSION, ddl_script
from tests.beat.beat_helpers import TASK, next_at, queued_boundaries
from tests.helpers import make_app, run_sql


def _app(target, schedule_=None, **conf):
    conf.setdefault("beat_alkstore_lease_ttl", 30)
    conf.setdefault("beat_max_loop_interval", 5)
    conf.setdefault("beat_alkstore_catch_up", "replay")  # these tests replay each boundary
    return make_app(target, beat_schedule=schedule_ or {}, **conf)


def _row(name, spec, next_at_, options="{}", tz="UTC"):
    p = parse_spec(spec, tz=tz)
    return ScheduleRow(
        name, p.text, float(p.interval), TASK, "[]", "{}", options, next_at_, "api", p.kind, p.tz
    )


@pytest.fixture
def store(target):
    s = target.open()
    yield s
    s.close()


def test_cron_fires_each_missed_boundary_advancing_from_the_stored_one(target, store):
    s = Scheduler(app=_app(target))
    try:
        now = store.schedule_clock()
        start = (now // 60 - 3) * 60  # three whole minutes ago
        store.schedule_upsert(_row("m", "cron * * * * *", start), keep_grid=False)
        s.tick()
        fired = queued_boundaries(store, name="m")
        assert fired[:4] == [start, start + 60, start + 120, start + 180]
        row = store.schedule_get("m")
        assert row.next_at == fired[-1] + 60 > now
        assert row.run_count == len(fired) and row.last_run_at >= now
        assert row.last_error is None
    finally:
        s.close()


def test_crontab_objects_in_beat_schedule_are_read_in_the_app_timezone(target, store):
    entry = {
        "task": TASK,
        "schedule": crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
    }
    s = Scheduler(app=_app(target, {"office": entry}, timezone="Europe/Paris"))
    try:
        row = store.schedule_get("office")
        assert (row.kind, row.spec, row.tz) == (
            "cron",
            "cron */15 9-17 * * mon-fri",
            "Europe/Paris",
        )
        local = datetime.fromtimestamp(row.next_at, parse_spec("@daily Europe/Paris").cron.tz)
        assert local.minute % 15 == 0 and 9 <= local.hour <= 17 and local.isoweekday() <= 5
        assert row.next_at > time.time()
    finally:
        s.close()


def test_due_is_decided_by_the_database_clock(pg_target, monkeypatch):
    """A beat host one hour fast fires nothing early: PostgreSQL's clock decides."""
    store = pg_target.open()
    s = Scheduler(app=_app(pg_target))
    try:
        first = (store.schedule_clock() // 60 + 1) * 60
        store.schedule_upsert(_row("minutely", "@every 1m", first), keep_grid=False)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        s.tick()
        monkeypatch.setattr(time, "time", real)
        assert queued_boundaries(store, name="minutely") == []
        assert next_at(store, "minutely") == first
    finally:
        s.close()
        store.close()


def test_a_failing_schedule_never_refires_the_others_with_another_broker(target, store):
    """Broker memory:// (not the store): 'bad' cannot be serialized; the boundaries of
    'good' published in the same tick are never published again by a retry."""
    app = Celery("foreign", broker="memory://", set_as_current=False)
    app.conf.update(
        beat_alkstore_url=target.url,
        beat_alkstore_options={"schema": target.schema},
        beat_alkstore_lease_ttl=30,
        beat_alkstore_catch_up="replay",  # each missed boundary fires
    )
    s = Scheduler(app=app)
    try:
        now = store.schedule_clock()
        good = (now // 1 - 3) * 1.0
        store.schedule_upsert(_row("a-good", "@every 1s", good), keep_grid=False)
        store.schedule_upsert(
            _row("b-bad", "@every 1s", good, options='{"serializer": "nope"}'), keep_grid=False
        )
        store.schedule_upsert(_row("c-good", "@every 1s", good), keep_grid=False)
        s.tick()
        s._failing.clear()  # retry 'bad' at once: as a later tick would
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
        for name in ("a-good", "c-good"):
            fired = [
                m.headers["alkstore_boundary"]
                for m in got
                if m.headers["alkstore_schedule"] == name
            ]
            assert len(fired) == len(set(fired)), f"{name} refired: {sorted(fired)}"
            assert fired[:4] == [good, good + 1, good + 2, good + 3]
        bad = store.schedule_get("b-bad")
        assert bad.next_at == good and bad.run_count == 0
        assert "nope" in bad.last_error
    finally:
        s.close()


def test_disabled_keeps_its_grid_and_resumes_on_it_without_replaying(target, store):
    entry = {"task": TASK, "schedule": "@every 2s"}
    s = Scheduler(app=_app(target, {"two": entry}))
    try:
        assert disable("two", store=store)
        now = store.schedule_clock()
        behind = (now // 2 - 5) * 2  # five boundaries behind, on the grid
        store.schedule_upsert(_row("two", "@every 2s", behind), keep_grid=False)
        s.tick()
        assert queued_boundaries(store, name="two") == []
        assert not store.schedule_get("two").enabled
        # Persisted: a restarted beat with the same beat_schedule keeps it disabled.
        s.close()
        s = Scheduler(app=_app(target, {"two": entry}))
        assert not store.schedule_get("two").enabled
        assert enable("two", store=store)
        row = store.schedule_get("two")
        assert row.enabled and row.next_at > now and (row.next_at - behind) % 2 == 0
        s.tick()
        assert all(b >= row.next_at for b in queued_boundaries(store, name="two"))
    finally:
        s.close()
    assert not disable("nope", store=store) and not enable("nope", store=store)


def test_run_now_is_one_extra_run_with_the_grid_untouched(target, store):
    s = Scheduler(app=_app(target))
    try:
        first = (store.schedule_clock() // 3600 + 1) * 3600
        store.schedule_upsert(_row("hourly", "@every 1h", first), keep_grid=False)
        assert run_now("hourly", store=store) and run_now("hourly", store=store)
        assert not run_now("missing", store=store)
        s.tick()
        s.tick()
        jobs = store.claim(["celery"], limit=10)
        assert len(jobs) == 1
        headers = json.loads(bytes(jobs[0].body))["headers"]
        assert headers["alkstore_run_now"] is True and headers["alkstore_schedule"] == "hourly"
        store.ack(jobs)
        row = store.schedule_get("hourly")
        assert row.next_at == first and row.run_count == 1 and row.run_requested is None
        assert row.last_run_at is not None
    finally:
        s.close()


def test_a_stored_spec_that_cannot_be_read_is_an_error_naming_it_and_the_grammar(
    target, store, caplog
):
    s = Scheduler(app=_app(target))
    try:
        now = store.schedule_clock()
        bad = ScheduleRow(
            "typo", "cron 99 * * * *", 0.0, TASK, "[]", "{}", "{}", now - 5, "api", "cron"
        )
        store.schedule_upsert(bad, keep_grid=False)
        store.schedule_upsert(_row("fine", "@every 1s", now // 1 - 1), keep_grid=False)
        with caplog.at_level(logging.ERROR):
            s.tick()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("'typo'" in m and "cron 99" in m and GRAMMAR in m for m in errors), errors
        assert "minute" in store.schedule_get("typo").last_error
        assert queued_boundaries(store, name="fine")
    finally:
        s.close()


def test_task_names_are_checked_against_the_registry(target, store, caplog):
    app = _app(target)

    @app.task(name="proj.tasks.report", shared=False)
    def report():
        return None

    with pytest.raises(ConfigurationError, match=r"'proj\.tasks\.reprot' is not registered.*"):
        schedule("r", "@daily", "proj.tasks.reprot", app=app, store=store)
    with pytest.raises(ConfigurationError, match="did you mean 'proj.tasks.report'"):
        schedule("r", "@daily", "proj.tasks.reprot", app=app, store=store)
    assert store.schedule_get("r") is None
    made = schedule("r", "@daily", "proj.tasks.reprot", app=app, store=store, check_task=False)
    assert made.kind == "cron" and made.tz == "UTC"
    with caplog.at_level(logging.WARNING):
        Scheduler(app=app).close()
    assert any(
        "'r'" in r.getMessage() and "not registered" in r.getMessage() for r in caplog.records
    )


def test_schema_version_2_is_upgraded_with_the_schedule_columns(target):
    """A version-2 table (no kind/tz/lifecycle columns) with a schedule in it: refused with
    setup off, upgraded in place by setup (twice: idempotent), the schedule kept."""
    store = target.open()
    t = store.tables
    sched, meta = t.qualified(t.schedules), t.qualified(t.meta)
    store.close()
    cols = ["kind", "tz", "enabled", "last_run_at", "run_count", "last_error", "run_requested"]
    for col in cols:
        run_sql(target, f"ALTER TABLE {sched} DROP COLUMN {col}")
    run_sql(
        target,
        f"INSERT INTO {sched} (name, spec, interval, task, args, kwargs, options, next_at, "
        f"origin, updated_at) VALUES ('old', '@every 1m', 60, 't', '[]', '{{}}', '{{}}', "
        f"120, 'api', 0)",
    )
    run_sql(target, f"UPDATE {meta} SET value = '2' WHERE key = 'schema_version'")
    with pytest.raises(SchemaMissing, match=rf"schema version 2, .* needs {SCHEMA_VERSION}"):
        target.open(setup=False)
    if target.engine == "postgresql":
        script = ddl_script(target.schema, "postgresql")
        run_sql(target, script)
        run_sql(target, script)  # the printed migration is idempotent
    for _ in range(2):
        upgraded = target.open()
        try:
            assert upgraded.schema_version() == SCHEMA_VERSION
            row = upgraded.schedule_get("old")
            assert (row.kind, row.tz, row.enabled, row.run_count) == ("every", "UTC", True, 0)
            assert row.next_at == 120
        finally:
            upgraded.close()
        run_sql(target, f"UPDATE {meta} SET value = '2' WHERE key = 'schema_version'")
    target.open().close()


def test_sqlite_printed_script_never_stamps_a_file_it_cannot_upgrade(sqlite_target):
    store = sqlite_target.open()
    t = store.tables
    sched, meta = t.qualified(t.schedules), t.qualified(t.meta)
    store.close()
    run_sql(sqlite_target, f"ALTER TABLE {sched} DROP COLUMN run_requested")
    run_sql(sqlite_target, f"UPDATE {meta} SET value = '2' WHERE key = 'schema_version'")
    script = ddl_script(sqlite_target.schema, "sqlite")
    run_sql(sqlite_target, script)
    run_sql(sqlite_target, script)
    with pytest.raises(SchemaMissing, match="schema version 2"):
        sqlite_target.open(setup=False)
    sqlite_target.open().close()  # setup adds the column
    sqlite_target.open(setup=False).close()
