"""Operator acts from the CLI (cli/acts.py): each acting command writes its act with its
change, ``--by`` (default: the OS user name) and ``--reason``; ``acts`` lists them."""

from __future__ import annotations

import getpass
import json

import pytest

from tests.cli.conftest import run_cli, run_module
from tests.helpers import run_sql


def test_acting_commands_write_acts_and_acts_lists_them(target, seeder):
    ids = [seeder.dead("proj.add", (i, i), queue="work")[0] for i in range(3)]
    r = run_cli(
        target, "dead", "requeue", "--queue", "work", "--by", "ops:alice", "--reason", "INC-7"
    )
    assert r.code == 0, r.err
    r = run_cli(target, "queue", "pause", "work")  # --by defaults to the OS user name
    assert r.code == 0, r.err
    r = run_cli(target, "queue", "pause", "work", "--by", "ops:bob")  # paused already: no act
    assert r.code == 0 and "was paused already" in r.out
    r = run_cli(target, "queue", "resume", "work", "--by", "ops:bob", "--reason", "done")
    assert r.code == 0, r.err
    seeder.kill("work", n=10)  # the requeued three die again
    r = run_cli(target, "dead", "purge", "--queue", "work", "-f", "--by", "ops:carol")
    assert r.code == 0 and "purged 3" in r.out, r.err

    r = run_cli(target, "acts", "--json")
    assert r.code == 0, r.err
    acts = json.loads(r.out)
    assert [(a["act"], a["by"], a["reason"]) for a in acts] == [
        ("dead_purge", "ops:carol", None),
        ("queue_resume", "ops:bob", "done"),
        ("queue_pause", getpass.getuser(), None),
        ("dead_requeue", "ops:alice", "INC-7"),
    ]
    requeue = acts[-1]
    assert (requeue["queue"], requeue["count"], requeue["ids"]) == ("work", 3, sorted(ids))
    assert "proj.add" not in r.out  # no message content in an act

    r = run_cli(target, "acts")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["ID", "AT", "ACT", "BY", "QUEUE", "JOBS", "IDS", "REASON"]
    assert "dead_requeue" in lines[-1] and "ops:alice" in lines[-1] and "INC-7" in lines[-1]

    r = run_cli(target, "acts", "--by", "ops:bob", "--json")
    assert [a["act"] for a in json.loads(r.out)] == ["queue_resume"]
    r = run_cli(target, "acts", "--act", "dead_purge", "--queue", "work", "--json")
    assert [a["by"] for a in json.loads(r.out)] == ["ops:carol"]
    r = run_cli(target, "acts", "--since", "1h", "--limit", "2")
    assert r.code == 0 and "(first 2, newest first" in r.out
    r = run_cli(target, "acts", "--queue", "other")
    assert r.code == 0 and r.out == "no acts on record matching the filters\n"


def test_a_command_that_changes_nothing_writes_no_act(target, seeder):
    r = run_cli(target, "dead", "requeue", "--queue", "nothing", "--by", "x")
    assert r.code == 0 and "no dead letters" in r.out
    r = run_cli(target, "queue", "resume", "never-paused", "--by", "x")
    assert r.code == 0 and "was not paused" in r.out
    r = run_cli(target, "dead", "purge", "--all", "-f", "--by", "x")
    assert r.code == 0 and "purged 0" in r.out
    r = run_cli(target, "acts")
    assert r.code == 0 and r.out == "no acts on record\n"


@pytest.mark.parametrize("bad", [["--by", ""], ["--reason", "two\nlines"], ["--by", "x" * 201]])
def test_by_and_reason_are_codes(target, seeder, bad):
    job_id, _ = seeder.dead("proj.add")
    r = run_cli(target, "dead", "requeue", str(job_id), *bad)
    assert r.code == 1 and ("is a code, not content" in r.err or "non-empty" in r.err), r.err
    assert seeder.store.get_job(job_id).state == "dead"  # refused before any change


def test_acts_refuses_bad_filters(target):
    r = run_cli(target, "acts", "--act", "bogus")
    assert r.code == 1 and "--act 'bogus'" in r.err
    r = run_cli(target, "acts", "--since", "yesterday")
    assert r.code == 1 and "--since 'yesterday'" in r.err


def test_the_record_refuses_to_be_altered(target, seeder):
    """As an operator with the runtime role's rights would try it, outside the store."""
    seeder.dead("proj.add", queue="work")
    assert run_cli(target, "dead", "purge", "--queue", "work", "-f", "--by", "ops:eve").code == 0
    table = seeder.store.names["acts"]  # as written in SQL
    for sql in (f"UPDATE {table} SET actor = 'someone else'", f"DELETE FROM {table}"):
        with pytest.raises(Exception, match="append-only"):
            run_sql(target, sql)
    r = run_cli(target, "acts", "--json")
    assert [a["by"] for a in json.loads(r.out)] == ["ops:eve"]


def test_module_acts_in_a_subprocess(target, seeder):
    base = ["-b", target.broker_url, "--schema", target.schema]
    seeder.send("proj.add", (1, 2), queue="q")
    r = run_module(*base, "queue", "pause", "q", "--by", "ops:dora", "--reason", "deploy")
    assert r.code == 0, r.err
    r = run_module(*base, "acts", "--act", "queue_pause")
    assert r.code == 0, r.err
    assert "queue_pause" in r.out and "ops:dora" in r.out and "deploy" in r.out
