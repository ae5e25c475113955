"""The CLI as operators run it: ``python -m kombu_alkstore`` and the console script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import run_module


def test_module_status_and_dead_letters(target, seeder):
    job_id, task_id = seeder.dead("proj.add", (4, 5), error="attempts exhausted")
    seeder.send("proj.add", (1, 1))
    base = ["-b", target.broker_url, "--schema", target.schema]

    r = run_module(*base, "status")
    assert r.code == 0, r.err
    assert "celery" in r.out and "PENDING" in r.out

    r = run_module(*base, "dead", "list")
    assert r.code == 0, r.err
    assert task_id in r.out and "proj.add" in r.out and "attempts exhausted" in r.out

    r = run_module(*base, "dead", "show", task_id)
    assert r.code == 0 and "args:        [4, 5]" in r.out

    r = run_module(*base, "dead", "requeue", str(job_id))
    assert r.code == 0 and "requeued 1 dead letter" in r.out
    assert seeder.store.get_job(task_id).state == "pending"


def test_module_reads_broker_from_environment(target):
    env = {"CELERY_BROKER_URL": target.broker_url, "ALKSTORE_SCHEMA": target.schema}
    r = run_module("setup", env=env)
    assert r.code == 0, r.err
    r = run_module("status", env=env)
    assert r.code == 0 and "no messages" in r.out


def test_console_script(target):
    script = Path(sys.executable).parent / "kombu-alkstore"
    assert script.exists(), f"console script not installed next to {sys.executable}"
    proc = subprocess.run(
        [str(script), "-b", target.broker_url, "--schema", target.schema, "setup", "--print"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    assert "CREATE TABLE IF NOT EXISTS" in proc.stdout


def test_watch_stops_on_interrupt(target, seeder):
    import signal
    import time

    seeder.send("proj.add", (1, 1))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kombu_alkstore",
            "-b",
            target.broker_url,
            "--schema",
            target.schema,
            "status",
            "--watch",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # An operator's terminal delivers Ctrl-C; a shell's background job (a CI run
        # started with "&") would start us with SIGINT ignored, and the child with it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.count("QUEUE") >= 2 and "Traceback" not in err
