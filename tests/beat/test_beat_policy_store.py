"""The policies' storage (the options JSON), the API, the CLI and a beat start, on both
engines: no migration, the beat's state kept across upserts."""

from __future__ import annotations

import json
import re

import pytest

from celery_beat_alkstore import Scheduler, get_schedule, schedule
from kombu_alkstore.errors import ConfigurationError
from tests.beat.beat_helpers import TASK
from tests.beat.test_beat_cli import cli, ok, one_line_error
from tests.helpers import make_app


@pytest.fixture
def store(target):
    s = target.open()
    yield s
    s.close()


def _skip_busy(store, name: str, count: int) -> None:
    """As a tick does when the previous run is live: ``count`` due times skipped."""
    row = store.schedule_get(name)
    with store.schedule_tick() as tx:
        assert tx.skip_busy(name, row.next_at, row.next_at + 60, count)
        tx.set_job(name, 12345)


def test_policies_are_fields_not_apply_async_options(store):
    s = schedule(
        "r",
        "@every 1m",
        TASK,
        options={"queue": "q"},
        catch_up="skip",
        no_stacking=True,
        store=store,
    )
    assert (s.catch_up, s.no_stacking, s.skipped, s.options) == ("skip", True, 0, {"queue": "q"})
    stored = json.loads(store.schedule_get("r").options)
    assert stored == {"queue": "q", "alkstore_catch_up": "skip", "alkstore_no_stacking": True}
    plain = schedule("p", "@every 1m", TASK, store=store)
    assert (plain.catch_up, plain.no_stacking) == (None, False)
    assert store.schedule_get("p").options == "{}"  # nothing stored for the defaults


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"catch_up": "all"}, ["catch_up must be one of 'replay', 'once', 'skip'", "'all'"]),
        ({"no_stacking": "yes"}, ["no_stacking must be true or false"]),
        ({"options": {"alkstore_state": {}}}, ["option 'alkstore_state' is reserved"]),
    ],
    ids=["policy", "no-stacking", "reserved"],
)
def test_bad_policies_are_refused_naming_the_schedule(store, kwargs, words):
    with pytest.raises(ConfigurationError) as err:
        schedule("bad", "@every 1m", TASK, store=store, **kwargs)
    assert "schedule 'bad'" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_the_skipped_count_survives_upserts_and_beat_starts(target, store):
    entry = {"task": TASK, "schedule": 60, "no_stacking": True, "catch_up": "replay"}
    app = make_app(target, beat_schedule={"n": entry}, beat_alkstore_lease_ttl=30)
    Scheduler(app=app).close()
    _skip_busy(store, "n", 3)
    _skip_busy(store, "n", 2)
    assert get_schedule("n", store=store).skipped == 5
    Scheduler(app=app).close()  # the config upserted again: options replaced, state kept
    s = get_schedule("n", store=store)
    assert (s.skipped, s.catch_up, s.no_stacking) == (5, "replay", True)
    assert json.loads(store.schedule_get("n").options)["alkstore_state"] == {
        "skipped": 5,
        "job": 12345,
    }
    schedule("n", "@every 1m", TASK, options={"queue": "x"}, store=store)  # policies dropped
    s = get_schedule("n", store=store)
    assert (s.skipped, s.catch_up, s.no_stacking, s.options) == (5, None, False, {"queue": "x"})


def test_a_bad_default_setting_stops_beat_with_one_line(target):
    app = make_app(target, beat_alkstore_catch_up="always")
    with pytest.raises(SystemExit) as err:
        Scheduler(app=app)
    assert "beat_alkstore_catch_up must be one of 'replay', 'once', 'skip'" in str(err.value)


def test_cli_add_and_list_show_the_policies(target, store):
    b = ["-b", target.broker_url, "--schema", target.schema]
    out = ok(
        cli(
            *b,
            "add",
            "n",
            "@every 1m",
            TASK,
            "--skip-task-check",
            "--catch-up",
            "skip",
            "--no-stacking",
        )
    )
    assert "(catch-up skip, no stacking)" in out
    out = ok(cli(*b, "add", "d", "@every 1h", TASK, "--skip-task-check"))
    assert "(catch-up default)" in out
    _skip_busy(store, "n", 4)
    lines = ok(cli(*b, "list")).splitlines()
    head = re.split(r"\s{2,}", lines[0])
    assert head[8:11] == ["CATCH-UP", "STACKING", "SKIPPED"], head
    rows = {line.split()[0]: re.split(r"\s{2,}", line) for line in lines[1:]}
    assert rows["n"][8:11] == ["skip", "no", "4"]
    assert rows["d"][8:11] == ["default", "yes", "0"]
    listed = {s["name"]: s for s in json.loads(ok(cli(*b, "list", "--json")))}
    assert (listed["n"]["catch_up"], listed["n"]["no_stacking"], listed["n"]["skipped"]) == (
        "skip",
        True,
        4,
    )
    assert listed["n"]["options"] == {}
    assert (listed["d"]["catch_up"], listed["d"]["no_stacking"]) == (None, False)
    one_line_error(
        cli(*b, "add", "x", "@every 1m", TASK, "--skip-task-check", "--catch-up", "all"),
        "invalid choice: 'all'",
    )
