"""``celery purge`` removes delayed tasks (ETA, countdown) too: the broker holds them as
pending messages of their queue (issue 33: the docs and the CLI's help say so)."""

from __future__ import annotations

import os
import subprocess
import sys

from kombu_alkstore.cli import build_parser
from tests.cli.conftest import ROOT


def test_celery_purge_removes_delayed_tasks(target, seeder):
    seeder.send("proj.now")
    seeder.send("proj.later", countdown=3600)
    seeder.send("proj.eta", countdown=86400)
    (counts,) = seeder.store.counts(["celery"])
    assert (counts.pending, counts.delayed) == (1, 2)
    env = dict(
        os.environ,
        ALKSTORE_TEST_BROKER=target.broker_url,
        ALKSTORE_TEST_SCHEMA=target.schema,
        PYTHONPATH=ROOT,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.proj", "purge", "-f"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Purged 3 messages from 1 known task queue."
    (counts,) = seeder.store.counts(["celery"])
    assert (counts.pending, counts.delayed) == (0, 0)
    assert seeder.store.scheduled() == []


def test_scheduled_help_says_what_purge_and_query_task_do():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = " ".join(sub.choices["scheduled"].format_help().split())
    assert (
        "celery purge and the dashboard's Purge pending delete them too; celery inspect "
        "query_task does not see them (no worker holds them)"
    ) in text


def test_inspect_query_task_does_not_see_a_delayed_task(pg_target):
    """What the docs say: no worker holds a delayed task, so ``inspect query_task`` finds
    nothing for it, while it does find a task the worker runs."""
    import threading

    from tests.helpers import make_app, thread_worker, wait_for

    app = make_app(pg_target)
    release = threading.Event()

    @app.task(name="tasks.hold", shared=False)
    def hold():
        release.wait(30)

    try:
        with thread_worker(app, concurrency=1, hostname="q@test"):
            running = hold.delay()
            later = hold.apply_async(countdown=3600)
            insp = app.control.inspect(timeout=2.0, destination=["q@test"])
            wait_for(lambda: (insp.query_task(running.id) or {}).get("q@test"), timeout=30)
            assert insp.query_task(later.id) == {"q@test": {}}
            with pg_target.open() as store:
                assert [j.msg_id for j in store.scheduled()] == [later.id]
            release.set()
    finally:
        release.set()
