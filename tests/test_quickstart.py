"""The README's first command's script, run as a new user would (a smoke test)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs_and_exits_by_itself(tmp_path):
    proc = subprocess.run(
        [sys.executable, "examples/quickstart/run.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "ok  add(2, 3) = 5" in out
    assert "ok  countdown task ran" in out
    assert "dead-lettered" in out and "tasks.broken" in out
    if importlib.util.find_spec("celery_beat_alkstore") is not None:
        assert "ok  periodic task 'tick' from beat ran" in out
    assert out.rstrip().endswith("all tasks completed; worker and beat stopped.")
    # It cleaned up after itself: nothing is left in the worker's or beat's process group.
    groups = re.findall(r"\(pid (\d+)\)", out)
    assert groups, out
    for pgid in groups:
        left = subprocess.run(["pgrep", "-g", pgid], capture_output=True, text=True).stdout
        assert not left.split(), f"processes left running in group {pgid}: {left.split()}"


def test_from_redis_example_config_works(tmp_path, monkeypatch):
    """examples/from_redis/celeryconfig_alkstore.py, on an SQLite file set up by the CLI."""
    from celery import Celery

    from kombu_alkstore.cli import main

    broker = f"alkstore+sqlite:///{tmp_path / 'broker.db'}"
    monkeypatch.setenv("CELERY_BROKER_URL", broker)
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "from_redis"))
    assert main(["--schema", "proj", "setup"]) == 0  # the migration (setup=False in config)
    import celeryconfig_alkstore as conf

    assert [conf.redis_to_alkstore_priority(p) for p in (0, 3, 6, 9)] == [9, 6, 3, 0]
    app = Celery("from_redis", set_as_current=False)
    app.config_from_object(conf)
    assert app.conf.broker_url == broker
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue("email")
        queue.put({"to": "a@b"})
        message = queue.get(timeout=10)
        assert message.payload == {"to": "a@b"}
        message.ack()
        queue.close()
    app.close()


def test_postgres_ha_demo_two_beats(pg_target):
    """examples/postgres_ha/demo.py: the leader beat is killed, each boundary fires once."""
    proc = subprocess.run(
        [
            sys.executable,
            "examples/postgres_ha/demo.py",
            "--broker",
            pg_target.broker_url,
            "--lease-ttl",
            "3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fired twice: 0; missing: 0" in proc.stdout
    assert "took over the lease" in proc.stdout
