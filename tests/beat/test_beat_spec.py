"""The ``@every`` grammar, conversions, refusals, and schedule validation (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.schedules import schedule, solar

from celery_beat_alkstore import first_boundary, format_spec, parse_spec
from celery_beat_alkstore.api import make_row
from kombu_alkstore.errors import ConfigurationError


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("@every 1s", ("@every 1s", 1)),
        ("@every 90s", ("@every 90s", 90)),
        ("@every 120s", ("@every 2m", 120)),
        ("@every 5m", ("@every 5m", 300)),
        ("@every 2h", ("@every 2h", 7200)),
        ("@every 1d", ("@every 1d", 86400)),
        ("@every 7d", ("@every 7d", 604800)),
        ("  @every   10s ", ("@every 10s", 10)),
        ("@every 3 m", ("@every 3m", 180)),
        (30, ("@every 30s", 30)),
        (30.0, ("@every 30s", 30)),
        (3600, ("@every 1h", 3600)),
        (timedelta(minutes=15), ("@every 15m", 900)),
        (timedelta(days=1, seconds=1), ("@every 86401s", 86401)),
        (schedule(timedelta(seconds=45)), ("@every 45s", 45)),
        (schedule(10), ("@every 10s", 10)),
    ],
)
def test_accepted(spec, expected):
    parsed = parse_spec(spec)
    assert (parsed.text, parsed.interval, parsed.kind) == (*expected, "every")


@pytest.mark.parametrize(
    "spec, why",
    [
        ("@every 0s", "> 0"),
        ("@every -5s", "whole number"),
        ("@every 5", "whole number"),
        ("@every 5x", "whole number"),
        ("@every 1.5s", "whole number"),
        ("@every 5 seconds", "whole number"),
        ("@EVERY 5s", "unknown schedule"),
        ("", "unknown schedule"),
        ("every 5s", "5 fields"),
        ("@every 99999999999d", "100 years"),
        (0, "positive"),
        (-1, "positive"),
        (0.5, "whole number"),
        (float("nan"), "positive"),
        (float("inf"), "positive"),
        (True, "not a schedule"),
        (timedelta(0), "positive"),
        (timedelta(milliseconds=1500), "whole number"),
        (None, "not supported"),
        ([5], "not supported"),
        (solar.__new__(solar), "solar"),  # built bare: solar() itself needs ephem
    ],
)
def test_refused_with_the_reason_and_the_name(spec, why):
    with pytest.raises(ConfigurationError) as info:
        parse_spec(spec, "my-entry")
    assert why in str(info.value)
    assert "'my-entry'" in str(info.value)


def test_format_spec_picks_the_largest_whole_unit():
    assert [format_spec(s) for s in (1, 59, 60, 61, 3600, 5400, 86400, 172800)] == [
        "@every 1s",
        "@every 59s",
        "@every 1m",
        "@every 61s",
        "@every 1h",
        "@every 90m",
        "@every 1d",
        "@every 2d",
    ]


def test_first_boundary_is_on_the_epoch_grid_and_in_the_future():
    assert first_boundary(60, 1000.0) == 1020.0
    assert first_boundary(60, 1020.0) == 1080.0
    assert first_boundary(1, 5.5) == 6.0
    assert first_boundary(86400, 86400 * 3 + 1) == 86400 * 4


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"name": ""}, ["schedule name", "empty"]),
        ({"name": "__alkstore_x"}, ["reserved"]),
        ({"name": "x" * 2000}, ["at most"]),
        ({"name": 5}, ["must be a string"]),
        ({"task": ""}, ["task"]),
        ({"task": None}, ["task"]),
        ({"args": "abc"}, ["args must be a list"]),
        ({"args": 5}, ["args must be a list"]),
        ({"kwargs": [1]}, ["kwargs"]),
        ({"kwargs": {1: 2}}, ["kwargs"]),
        ({"options": "q"}, ["options must be a mapping"]),
        ({"options": {"priority": 256}}, ["priority"]),
        ({"options": {"priority": "high"}}, ["priority"]),
        ({"options": {"expires": -1}}, ["expires"]),
        ({"options": {"queue": ""}}, ["queue name"]),
        ({"options": {"queue": 5}}, ["queue"]),
        ({"options": {"headers": 5}}, ["headers"]),
        ({"args": [object()]}, ["args cannot be stored as JSON"]),
    ],
)
def test_bad_schedules_are_refused(kwargs, words):
    fields = {"name": "n", "spec": "@every 1s", "task": "t", **kwargs}
    with pytest.raises(ConfigurationError) as info:
        make_row(**fields)
    for w in words:
        assert w in str(info.value)


def test_names_are_data():
    for name in [
        'quote\'s "double"',
        "unicode ünï 漢字 🙂",
        "semi;colon -- DROP TABLE x",
        "a" * 1024,
    ]:
        row = make_row(name, "@every 5s", "t", [1, "x"], {"k": [1]}, {"queue": name})
        assert row.name == name
