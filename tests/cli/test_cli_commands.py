"""Every CLI command against both engines (``main(argv)`` in-process)."""

from __future__ import annotations

import json

from kombu_alkstore.present import decode
from tests.cli.conftest import run_cli
from tests.helpers import run_sql


def not_set_up(r) -> bool:
    """The one-line error for a store whose tables (or SQLite file) are not there."""
    return (
        r.code == 1
        and r.err.count("\n") == 1
        and ("missing" in r.err or "does not exist" in r.err)
        and "kombu-alkstore setup" in r.err
    )


def test_setup_applies_ddl_then_status_works(target):
    r = run_cli(target, "status")
    assert not_set_up(r), r.err
    r = run_cli(target, "setup")
    assert r.code == 0, r.err
    assert "tables ready" in r.out and target.schema in r.out
    r = run_cli(target, "setup")  # idempotent
    assert r.code == 0, r.err
    r = run_cli(target, "status")
    assert r.code == 0, r.err
    assert "no messages in any queue" in r.out


def test_setup_print_is_the_engines_ddl(target):
    r = run_cli(target, "setup", "--print")
    assert r.code == 0, r.err
    assert "CREATE TABLE IF NOT EXISTS" in r.out
    if target.engine == "postgresql":
        assert f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"' in r.out
        assert f'"{target.schema}"."jobs"' in r.out
    else:
        assert f"{target.schema}_jobs" in r.out
        assert "CREATE SCHEMA" not in r.out
    # Printing creates nothing.
    assert not_set_up(run_cli(target, "status"))
    # Applied as a migration (twice: it is idempotent), the store opens with setup off.
    run_sql(target, r.out)
    run_sql(target, r.out)
    r = run_cli(target, "status")
    assert r.code == 0 and "no messages" in r.out
    store = target.open(setup=False)
    try:
        store.enqueue("q", b"x")
        assert store.counts()[0].pending == 1
    finally:
        store.close()


def test_setup_print_grant(target):
    r = run_cli(target, "setup", "--print", "--grant", "app_rw")
    if target.engine == "postgresql":
        assert r.code == 0, r.err
        assert f'GRANT USAGE ON SCHEMA "{target.schema}" TO "app_rw"' in r.out
        assert "ON ALL SEQUENCES" in r.out
        r = run_cli(target, "setup", "--print", "--grant", "bad role;")
        assert r.code == 1 and "not a valid identifier" in r.err and r.out == ""
    else:
        assert r.code == 1 and "PostgreSQL only" in r.err and r.out == ""
    r = run_cli(target, "setup", "--grant", "app_rw")
    assert r.code == 1 and "--print" in r.err


def test_status_counts_every_state(target, seeder):
    seeder.send("proj.add", (1, 2))
    seeder.send("proj.add", (3, 4))
    seeder.send("proj.later", countdown=3600)
    seeder.send("proj.work", queue="work")
    seeder.send("proj.work", queue="work")
    seeder.store.claim(["work"], 1)  # one processing
    seeder.dead("proj.bad", queue="work")
    r = run_cli(target, "status")
    assert r.code == 0, r.err
    lines = {ln.split()[0]: ln.split()[1:] for ln in r.out.splitlines()[2:]}
    assert lines["celery"][:4] == ["2", "1", "0", "0"]
    assert lines["work"][:4] == ["1", "0", "1", "1"]
    assert lines["(total)"][:4] == ["3", "1", "1", "1"]
    assert r.out.splitlines()[1].split() == [
        "QUEUE",
        "PENDING",
        "DELAYED",
        "PROCESSING",
        "DEAD",
        "OLDEST",
    ]

    r = run_cli(target, "status", "--json")
    data = {row["queue"]: row for row in json.loads(r.out)}
    assert data["celery"]["pending"] == 2 and data["celery"]["delayed"] == 1
    assert data["work"]["processing"] == 1 and data["work"]["dead"] == 1
    assert data["celery"]["oldest_age"] >= 0

    r = run_cli(target, "status", "--queue", "work", "--json")
    assert [row["queue"] for row in json.loads(r.out)] == ["work"]


def test_status_watch_refreshes(target, seeder):
    seeder.send("proj.add", (1, 2))
    r = run_cli(target, "status", "--watch", "0.1", "--iterations", "3")
    assert r.code == 0, r.err
    assert r.out.count("QUEUE") == 3
    r = run_cli(target, "status", "--watch", "0")
    assert r.code == 2


def test_dead_list(target, seeder):
    r = run_cli(target, "dead", "list")
    assert r.code == 0 and "no dead letters" in r.out
    first, first_tid = seeder.dead("proj.add", (2, 2), error="attempts exhausted")
    second, second_tid = seeder.dead(
        "proj.mail", kwargs={"to": "x@y"}, queue="mail", error="rejected\nwith detail"
    )
    r = run_cli(target, "dead", "list")
    assert r.code == 0, r.err
    header, *rows = r.out.splitlines()
    assert header.split()[:3] == ["ID", "TASK", "ID"]
    assert len(rows) == 2
    newest, oldest = rows
    assert newest.split()[:5] == [str(second), second_tid, "proj.mail", "mail", "1/3"]
    assert newest.rstrip().endswith("rejected with detail")  # one line per dead letter
    assert oldest.split()[:5] == [str(first), first_tid, "proj.add", "celery", "1/3"]
    assert "attempts exhausted" in oldest

    r = run_cli(target, "dead", "list", "--queue", "mail")
    assert len(r.out.splitlines()) == 2 and "proj.mail" in r.out
    r = run_cli(target, "dead", "list", "--limit", "1")
    assert "proj.mail" in r.out and "proj.add" not in r.out and "--limit" in r.out
    r = run_cli(target, "dead", "list", "--limit", "0")
    assert r.code == 1 and "--limit" in r.err
    r = run_cli(target, "dead", "list", "--json")
    data = json.loads(r.out)
    assert [d["task_id"] for d in data] == [second_tid, first_tid]
    assert data[0]["task"] == "proj.mail" and data[0]["last_error"] == "rejected\nwith detail"
    assert data[1]["attempts"] == 1 and data[1]["died_at"] > 0


def test_dead_show_by_id_and_task_id(target, seeder):
    job_id, task_id = seeder.dead("proj.add", (2, 3), {"scale": 10}, error="attempts exhausted")
    for ident in (str(job_id), task_id):
        r = run_cli(target, "dead", "show", ident)
        assert r.code == 0, r.err
        assert r.out.startswith(f"dead letter {job_id} in queue 'celery'")
        assert "task:        proj.add" in r.out
        assert f"task id:     {task_id}" in r.out
        assert "args:        [2, 3]" in r.out
        assert 'kwargs:      {"scale": 10}' in r.out
        assert "last error:  attempts exhausted" in r.out
        assert "attempts:    1/3" in r.out
        assert "headers:" in r.out and 'task: "proj.add"' in r.out
    r = run_cli(target, "dead", "show", task_id, "--json")
    data = json.loads(r.out)
    assert data["id"] == job_id and data["args"] == [2, 3] and data["kwargs"] == {"scale": 10}
    assert data["headers"]["task"] == "proj.add" and data["state"] == "dead"


def test_dead_show_unknown_and_live(target, seeder):
    r = run_cli(target, "setup")
    r = run_cli(target, "dead", "show", "999999")
    assert r.code == 1
    assert r.err.count("\n") == 1 and "no dead letter" in r.err and "999999" in r.err
    r = run_cli(target, "dead", "show", "no-such-task-id")
    assert r.code == 1 and "no-such-task-id" in r.err
    task_id = seeder.send("proj.pending", (1,))
    r = run_cli(target, "dead", "show", task_id)
    assert r.code == 0 and "(pending, not dead)" in r.out and "proj.pending" in r.out


def test_dead_show_non_celery_bodies(target):
    store = target.open()
    try:
        store.enqueue("raw", b"\x00not json", msg_id="raw-1")
        store.fail(store.claim(["raw"]), "undecodable message: nope")
    finally:
        store.close()
    r = run_cli(target, "dead", "show", "raw-1")
    assert r.code == 0, r.err
    assert "undecodable:" in r.out and "undecodable message: nope" in r.out
    r = run_cli(target, "dead", "list")
    assert r.code == 0 and "raw" in r.out


def test_decode_pickle_is_not_deserialized():
    envelope = {
        "body": "gASVAAAAAAAAAAAu",
        "content-type": "application/x-python-serialize",
        "content-encoding": "binary",
        "headers": {"task": "t.x", "id": "abc"},
        "properties": {"body_encoding": "base64"},
    }
    d = decode(json.dumps(envelope).encode())
    assert d["task"] == "t.x" and d["task_id"] == "abc"
    assert "not decoded" in d["body_note"] and "args" not in d


def test_decode_protocol_1():
    import base64

    body = base64.b64encode(
        json.dumps({"task": "t.y", "id": "i1", "args": [1], "kwargs": {}}).encode()
    ).decode()
    envelope = {
        "body": body,
        "content-type": "application/json",
        "headers": {},
        "properties": {"body_encoding": "base64"},
    }
    d = decode(json.dumps(envelope).encode())
    assert (d["task"], d["task_id"], d["args"], d["kwargs"]) == ("t.y", "i1", [1], {})


def test_dead_requeue_by_ids(target, seeder):
    a, a_tid = seeder.dead("proj.a")
    b, b_tid = seeder.dead("proj.b")
    c, _ = seeder.dead("proj.c")
    r = run_cli(target, "dead", "requeue", str(a), b_tid)
    assert r.code == 0, r.err
    assert "requeued 2 dead letters" in r.out
    counts = {c.queue: c for c in seeder.store.counts()}
    assert counts["celery"].pending == 2 and counts["celery"].dead == 1
    # The requeued message is the same one (same task id), with a fresh attempt budget.
    job = seeder.store.get_job(b_tid)
    assert job.state == "pending" and job.attempts == 0
    # Unknown or live ids are refused and nothing moves.
    r = run_cli(target, "dead", "requeue", str(c), "424242")
    assert r.code == 1 and "424242" in r.err
    assert seeder.store.get_job(c).state == "dead"
    r = run_cli(target, "dead", "requeue", a_tid)
    assert r.code == 1 and "pending, not a dead letter" in r.err


def test_dead_requeue_queue_and_all_with_progress(target, seeder):
    for i in range(7):
        seeder.send("proj.x", (i,))
    for i in range(3):
        seeder.send("proj.y", (i,), queue="other")
    seeder.kill("celery")
    seeder.kill("other")
    r = run_cli(target, "dead", "requeue", "--queue", "celery", "--batch", "3")
    assert r.code == 0, r.err
    assert "requeued 7 dead letters of queue 'celery'" in r.out
    assert "requeued 3/7" in r.err and "requeued 7/7 (100%)" in r.err
    counts = {c.queue: c for c in seeder.store.counts()}
    assert (counts["celery"].pending, counts["celery"].dead) == (7, 0)
    assert counts["other"].dead == 3
    r = run_cli(target, "dead", "requeue", "--all")
    assert r.code == 0 and "requeued 3 dead letters" in r.out and r.err == ""
    r = run_cli(target, "dead", "requeue", "--all")
    assert r.code == 0 and "no dead letters" in r.out


def test_dead_requeue_and_purge_need_one_selection(target, seeder):
    seeder.dead("proj.a")
    for action in ("requeue", "purge"):
        r = run_cli(target, "dead", action)
        assert r.code == 1 and "exactly one" in r.err
        r = run_cli(target, "dead", action, "1", "--all")
        assert r.code == 1 and "exactly one" in r.err
        r = run_cli(target, "dead", action, "--queue", "q", "--all")
        assert r.code == 1 and "exactly one" in r.err
    assert seeder.store.counts()[0].dead == 1


def test_dead_purge(target, seeder):
    a, _ = seeder.dead("proj.a")
    b, b_tid = seeder.dead("proj.b")
    seeder.dead("proj.c", queue="other")
    seeder.dead("proj.d", queue="other")
    seeder.dead("proj.e", queue="third")
    r = run_cli(target, "dead", "purge", str(a), b_tid)
    assert r.code == 0 and "purged 2 dead letters" in r.out
    assert seeder.store.get_job(a) is None
    r = run_cli(target, "dead", "purge", "--queue", "other", "-f")
    assert r.code == 0 and "purged 2 dead letters of queue 'other'" in r.out
    r = run_cli(target, "dead", "purge", str(a))
    assert r.code == 1 and str(a) in r.err
    r = run_cli(target, "dead", "purge", "--all", "--force")
    assert r.code == 0 and "purged 1 dead letter" in r.out
    assert all(c.dead == 0 for c in seeder.store.counts())


def test_sweep(target, seeder):
    import time

    seeder.send("proj.old", expires=0.2)
    seeder.send("proj.fresh")
    time.sleep(0.5)
    r = run_cli(target, "sweep")
    assert r.code == 0, r.err
    assert "expired to dead letters: 1" in r.out
    r = run_cli(target, "dead", "list")
    assert "proj.old" in r.out and "expired" in r.out
    r = run_cli(target, "sweep")
    assert "expired to dead letters: 0" in r.out


def test_scheduled_lists_delayed_tasks_soonest_first(target, seeder):
    later = seeder.send("proj.later", countdown=600, queue="slow")
    soon = seeder.send("proj.soon", args=(1,), countdown=60)
    seeder.send("proj.now")  # due: not scheduled
    r = run_cli(target, "scheduled")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["ETA", "TASK", "TASK", "ID", "QUEUE", "PRIORITY"]
    assert [line.split()[2:4] for line in lines[1:]] == [["proj.soon", soon], ["proj.later", later]]
    r = run_cli(target, "scheduled", "--queue", "slow", "--json")
    assert [j["task_id"] for j in json.loads(r.out)] == [later]
    assert (
        "no scheduled tasks in queue 'none'" in run_cli(target, "scheduled", "--queue", "none").out
    )
