"""``python -m celery_beat_alkstore``: list, add, remove, next; mistakes are one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from celery_beat_alkstore.cron import utc_iso
from tests.helpers import ROOT


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


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


def _clear_of_a_boundary(period: float = 120.0, margin: float = 45.0) -> None:
    """Wait past the next multiple of ``period`` when it is less than ``margin`` away, so
    that no boundary passes while the test compares what ``list`` and ``next`` say (one
    did in this stop's third dry run: both engines failed at 08:52:00)."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 1.0)


def test_add_list_next_remove(target):
    _clear_of_a_boundary()
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
    first = _epoch(by_name["report"]["next_at"])  # an ISO string, as the text output
    assert first % 120 == 0
    table = ok(cli(*b, "list"))
    assert "report" in table and "proj.fast" in table and "reports" in table
    upcoming = ok(cli(*b, "next", "-n", "4")).strip().splitlines()
    assert len(upcoming) == 8  # four of each schedule, by time (a report boundary may
    # fall between the fast ones: within 40 s of a 2-minute boundary it does)
    assert sorted(line.split()[1] for line in upcoming) == ["fast"] * 4 + ["report"] * 4
    times = [_epoch(line.split()[0]) for line in upcoming]
    assert times == sorted(times)
    only = ok(cli(*b, "next", "-n", "2", "report")).strip().splitlines()
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


def test_with_the_app_it_uses_the_store_beat_uses_even_with_celery_broker_url_set(target):
    """``-A`` with ``$CELERY_BROKER_URL`` set (as docs/operations.md has users do): the app's
    schema, where beat looks, not the default one (issue 29, defect 11: ``add`` wrote the
    schedule where beat never looks and ``list`` showed none of beat's)."""
    env = {
        "CELERY_BROKER_URL": target.broker_url,
        "ALKSTORE_TEST_BROKER": target.broker_url,
        "ALKSTORE_TEST_SCHEMA": target.schema,
    }
    app = ["-A", "tests.apps.beatproj"]
    ok(cli(*app, "add", "nightly", "@daily", "tests.apps.beatproj.stamp", env=env))
    assert "nightly" in ok(cli(*app, "list", env=env))
    with target.open() as store:
        from celery_beat_alkstore import api as beat_api

        assert [s.name for s in beat_api.list_schedules(store=store)] == ["nightly"]
    # $ALKSTORE_SCHEMA, as kombu-alkstore honours it, names the schema without -A.
    env_only = {"CELERY_BROKER_URL": target.broker_url, "ALKSTORE_SCHEMA": target.schema}
    assert "nightly" in ok(cli("list", env=env_only))


def test_next_without_a_name_is_each_schedules_next_run(target):
    """One ``@every 10s`` does not hide the nightly job: one line per schedule, soonest
    first, the disabled ones last (issue 33)."""
    b = ["-b", target.broker_url, "--schema", target.schema]
    for name, spec in (("nightly", "@daily"), ("fast", "@every 10s"), ("off", "@every 1h")):
        ok(cli(*b, "add", name, spec, f"proj.{name}", "--skip-task-check"))
    ok(cli(*b, "disable", "off"))
    listed = {s["name"]: s for s in json.loads(ok(cli(*b, "list", "--json")))}
    lines = ok(cli(*b, "next")).splitlines()
    assert len(lines) == 3
    for line, name in zip(lines[:2], ["fast", "nightly"], strict=True):
        at, shown, task, when = line.split(maxsplit=3)
        assert (at, shown, task) == (listed[name]["next_at"], name, f"proj.{name}")
        assert re.fullmatch(r"\((in|overdue by) \d+\.\ds\)", when), line
    assert lines[2] == "-                     off      proj.off  (disabled)"
    two = ok(cli(*b, "next", "-n", "2")).splitlines()
    assert [line.split()[1] for line in two] == ["fast", "fast", "nightly", "nightly", "off"]


def test_list_json_times_are_iso_strings_like_the_text(target):
    b = ["-b", target.broker_url, "--schema", target.schema]
    ok(cli(*b, "add", "r", "@every 1h", "proj.r", "--skip-task-check"))
    ok(cli(*b, "run-now", "r"))
    (row,) = json.loads(ok(cli(*b, "list", "--json")))
    with target.open() as store:
        stored = store.schedule_get("r")
    assert row["next_at"] == utc_iso(stored.next_at)
    assert row["run_requested"] == utc_iso(stored.run_requested)
    assert row["last_run_at"] is None
    assert row["next_at"] in ok(cli(*b, "list"))  # the same text as the table's NEXT
    assert row["interval"] == 3600.0


CONFIG_REMOVED = (
    "celery-beat-alkstore: note: 'nightly' is an entry of the app's beat_schedule: the next "
    "beat start stores it again (remove it from beat_schedule to remove it for good)"
)
CONFIG_CHANGED = (
    "celery-beat-alkstore: note: 'nightly' is an entry of the app's beat_schedule: the next "
    "beat start puts the config's version back (change beat_schedule to keep this)"
)


def test_remove_and_add_of_a_beat_schedule_entry_say_beat_takes_it_back(target):
    from celery_beat_alkstore import Scheduler
    from tests.helpers import make_app

    entry = {"task": "proj.nightly", "schedule": 86400.0}
    app = make_app(target, beat_schedule={"nightly": entry}, beat_alkstore_lease_ttl=30)
    Scheduler(app=app).close()  # a beat start stores the config's entry (origin config)
    b = ["-b", target.broker_url, "--schema", target.schema]
    r = cli(*b, "remove", "nightly")
    assert (r.returncode, r.stdout) == (0, "removed 'nightly'\n")
    assert r.stderr == CONFIG_REMOVED + "\n"
    Scheduler(app=app).close()  # ... and the next start stores it again, as the note says
    r = cli(*b, "add", "nightly", "@every 1h", "proj.nightly", "--skip-task-check")
    assert r.returncode == 0 and r.stdout.startswith("scheduled 'nightly': @every 1h")
    assert r.stderr == CONFIG_CHANGED + "\n"
    Scheduler(app=app).close()
    with target.open() as store:
        assert store.schedule_get("nightly").spec == "@every 1d"  # the config's again
    # A schedule of the API's own says nothing more.
    r = cli(*b, "add", "mine", "@every 1h", "proj.mine", "--skip-task-check")
    assert r.returncode == 0 and r.stderr == ""
    r = cli(*b, "remove", "mine")
    assert (r.returncode, r.stdout, r.stderr) == (0, "removed 'mine'\n", "")


def test_add_of_a_name_in_the_apps_beat_schedule_notes_it_before_any_beat_ran(target):
    env = {
        "ALKSTORE_TEST_BROKER": target.broker_url,
        "ALKSTORE_TEST_SCHEMA": target.schema,
        "ALKSTORE_BEAT_SCHEDULE": json.dumps(
            {"nightly": {"task": "tests.apps.beatproj.stamp", "schedule": 86400}}
        ),
    }
    r = cli(
        "-A",
        "tests.apps.beatproj",
        "add",
        "nightly",
        "@every 1h",
        "tests.apps.beatproj.stamp",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == CONFIG_CHANGED + "\n"
