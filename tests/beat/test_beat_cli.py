"""``python -m celery_beat_alkstore``: list, add, remove, next; mistakes are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from celery_beat_alkstore.cron import utc_iso
from tests.helpers import ROOT


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT))
    full_env.pop("CELERY_BROKER_URL", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "celery_beat_alkstore", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_add_list_next_remove(target):
    b = ["-b", target.broker_url, "--schema", target.schema]
    out = ok(
        cli(
            *b,
            "add",
            "report",
            "@every 2m",
            "proj.report",
            "--args",
            '[1, "x"]',
            "--kwargs",
            '{"full": true}',
            "--queue",
            "reports",
            "--priority",
            "7",
            "--skip-task-check",
        )
    )
    assert "report" in out and "@every 2m" in out
    ok(cli(*b, "add", "fast", "@every 10s", "proj.fast", "--skip-task-check"))
    listed = json.loads(ok(cli(*b, "list", "--json")))
    by_name = {s["name"]: s for s in listed}
    assert by_name["report"]["args"] == [1, "x"]
    assert by_name["report"]["kwargs"] == {"full": True}
    assert by_name["report"]["options"] == {"queue": "reports", "priority": 7}
    assert by_name["report"]["origin"] == "api"
    assert by_name["report"]["next_at"] % 120 == 0
    table = ok(cli(*b, "list"))
    assert "report" in table and "proj.fast" in table and "reports" in table
    upcoming = ok(cli(*b, "next", "-n", "4")).strip().splitlines()
    assert len(upcoming) == 4 and sum("fast" in line for line in upcoming) >= 3
    assert upcoming == sorted(upcoming)
    only = ok(cli(*b, "next", "-n", "2", "report")).strip().splitlines()
    first = by_name["report"]["next_at"]
    assert only == [utc_iso(first), utc_iso(first + 120)]  # timestamps only, scriptable
    # the default broker comes from CELERY_BROKER_URL
    out = ok(
        cli(
            "--schema",
            target.schema,
            "remove",
            "fast",
            env={"CELERY_BROKER_URL": target.broker_url},
        )
    )
    assert "removed" in out
    one_line_error(cli(*b, "remove", "fast"), "no schedule named 'fast'")
    assert [s["name"] for s in json.loads(ok(cli(*b, "list", "--json")))] == ["report"]


def test_plain_database_url_is_accepted(sqlite_target):
    t = sqlite_target
    ok(cli("-b", t.url, "--schema", t.schema, "add", "x", "@every 1h", "t", "--skip-task-check"))
    assert "x" in ok(cli("-b", t.url, "--schema", t.schema, "list"))


@pytest.mark.parametrize(
    "args, words",
    [
        (["add", "n", "*/5 * * * * Nowhere/City", "t"], ["'n'", "unknown time zone"]),
        (["add", "n", "cron 5 25 * * *", "t"], ["'n'", "hour", "expected '@every"]),
        (["add", "n", "@every 5x", "t"], ["'n'", "@every 5x"]),
        (["add", "n", "@every 5s", "t"], ["-A/--app", "--skip-task-check"]),
        (["add", "n", "@every 5s", "t", "--args", "{"], ["--args", "not valid JSON"]),
        (["add", "n", "@every 5s", "t", "--args", "{}"], ["--args", "JSON list"]),
        (["add", "n", "@every 5s", "t", "--kwargs", "[]"], ["--kwargs", "JSON object"]),
        (["add", "n", "@every 5s", "t", "--priority", "300"], ["priority"]),
        (["add", "__alkstore_x", "@every 5s", "t"], ["reserved"]),
        (["add", "", "@every 5s", "t"], ["empty"]),
        (["add", "n"], ["required"]),
        (["next", "-n", "0"], ["-n"]),
        (["next", "--after", "yesterday"], ["--after", "ISO-8601"]),
        (["frobnicate"], ["invalid choice"]),
        ([], ["command is required"]),
    ],
)
def test_mistakes_are_one_clear_line(sqlite_target, args, words):
    t = sqlite_target
    t.open().close()  # the tables exist: only the arguments are wrong
    one_line_error(cli("-b", t.broker_url, "--schema", t.schema, *args), *words)


def test_bad_broker_and_store_are_one_clear_line(sqlite_target, tmp_path):
    one_line_error(cli("list"), "no broker URL")
    one_line_error(cli("-b", "redis://localhost/0", "list"), "unsupported scheme")
    one_line_error(cli("-b", "alkstore+sqlite://", "list"), "SQLite needs a file")
    one_line_error(
        cli("-b", f"sqlite:///{tmp_path / 'empty.db'}", "--schema", "nothere", "list"),
        "tables are missing",
    )
    one_line_error(cli("-b", "sqlite:///x.db", "--schema", "bad-name", "list"), "schema")
    started = time.monotonic()
    one_line_error(cli("-b", "postgresql://nobody@127.0.0.1:1/x", "list"), "cannot connect")
    assert time.monotonic() - started < 30


def test_cron_next_lifecycle_and_task_check(target):
    b = ["-b", target.broker_url, "--schema", target.schema]
    app = ["-A", "tests.apps.beatproj"]
    one_line_error(
        cli(*b, *app, "add", "r", "@daily", "tests.apps.beatproj.stmap"),
        "'tests.apps.beatproj.stmap' is not registered",
        "did you mean 'tests.apps.beatproj.stamp'",
        "--skip-task-check",
    )
    out = ok(
        cli(
            *b,
            *app,
            "add",
            "r",
            "cron 30 1 * * *",
            "tests.apps.beatproj.stamp",
            "--tz",
            "Europe/London",
        )
    )
    assert "cron 30 1 * * * Europe/London" in out
    # London 2026: 01:30 is skipped on 29 March (fires at 02:00 BST = 01:00Z) and
    # repeated on 25 October (fires once, at 01:30 BST = 00:30Z).
    spring = ok(cli(*b, "next", "r", "--count", "3", "--after", "2026-03-27T12:00:00Z"))
    assert spring.splitlines() == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
    ]
    autumn = ok(cli(*b, "next", "r", "-n", "2", "--after", "2026-10-24T12:00"))
    assert autumn.splitlines() == ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    ok(cli(*b, "add", "e", "@every 1h", "t", "--skip-task-check"))
    hourly = ok(cli(*b, "next", "e", "--count", "2", "--after", "2026-01-01T00:10:00+01:00"))
    assert hourly.splitlines() == ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"]
    assert "disabled 'r'" in ok(cli(*b, "disable", "r"))
    assert "run requested for 'r'" in ok(cli(*b, "run-now", "r"))
    listed = {s["name"]: s for s in json.loads(ok(cli(*b, "list", "--json")))}
    assert listed["r"]["enabled"] is False and listed["r"]["run_requested"] is not None
    assert listed["r"]["tz"] == "Europe/London" and listed["r"]["run_count"] == 0
    table = ok(cli(*b, "list"))
    assert "disabled +run-now" in table and "cron 30 1 * * * Europe/London" in table
    assert "enabled 'r'" in ok(cli(*b, "enable", "r"))
    one_line_error(cli(*b, "run-now", "nope"), "no schedule named 'nope'")
