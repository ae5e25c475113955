"""examples/django, run as its README says: `manage.py migrate`, a real `celery worker`
subprocess, and the views driven through Django's test client (in a process of its own:
tests/examples/django_client.py), on PostgreSQL (a schema per test for the broker and one
for Django's tables) and on an SQLite file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.helpers import ROOT, kill_group, wait_for

pytest.importorskip("django")  # the [django] extra; the [test] extra installs it

pytestmark = pytest.mark.timeout(240)

EXAMPLE = ROOT / "examples" / "django"
CLIENT = Path(__file__).resolve().parent / "django_client.py"


def example_env(target, app_schema: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(CELERY_BROKER_URL=target.broker_url, SHOP_BROKER_SCHEMA=target.schema)
    if app_schema:
        env["SHOP_DB_SCHEMA"] = app_schema
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE), env.get("PYTHONPATH", "")])
    return env


def run(args: list[str], env: dict[str, str], timeout: float = 60) -> str:
    proc = subprocess.run(
        [sys.executable, *args], cwd=EXAMPLE, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def client(env: dict[str, str], *args: str) -> dict:
    return json.loads(run([str(CLIENT), *args], env, timeout=90).strip().splitlines()[-1])


def test_django_example_task_runs_after_the_commit_and_not_after_a_rollback(target, tmp_path):
    app_schema = f"{target.schema}_app" if target.engine == "postgresql" else None
    if app_schema:  # Django's tables in a schema of their own, dropped below
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{app_schema}"')
    env = example_env(target, app_schema)
    log = tmp_path / "worker.log"
    worker = None
    try:
        run(["manage.py", "migrate", "--verbosity", "0"], env)
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "proj", "worker", "--pool=threads",
                 "--concurrency=2", "--loglevel=INFO"],
                cwd=EXAMPLE, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

        def worker_log() -> str:
            return log.read_text(errors="replace")

        def ready() -> bool:
            assert worker.poll() is None, f"the worker exited:\n{worker_log()}"
            return " ready." in worker_log()

        wait_for(ready, timeout=90, interval=0.2)

        declined = client(env, "post", "book", "declined")
        assert declined["status"] == 402, declined
        committed = client(env, "post", "book")
        assert committed["status"] == 201, committed

        # The task ran, after the commit: it found the order, already paid (the view marks
        # it paid after the publish, just before the commit).
        status = client(env, "status", committed["body"]["ref"], "60")
        assert status["order"] == {"item": "book", "paid": True}, status
        assert status["receipt"] == {"order_found": True, "order_paid": True}, (
            status,
            worker_log(),
        )

        # Nothing left in the broker: the declined order's task was rolled back with it,
        # not merely still waiting.
        with target.open() as store:

            def drained():
                counts = store.counts()
                busy = sum(c.pending + c.delayed + c.processing + c.dead for c in counts)
                return busy == 0

            wait_for(drained, timeout=30, interval=0.2)
        status = client(env, "status", declined["body"]["ref"])
        assert status == {"ref": declined["body"]["ref"], "order": None, "receipt": None}
        received = re.findall(r"Task shop\.tasks\.send_receipt\[[^]]+\] received", worker_log())
        assert len(received) == 1, worker_log()
        assert "Traceback" not in worker_log(), worker_log()
    finally:
        if worker is not None:
            kill_group(worker)
        if app_schema:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{app_schema}" CASCADE')
