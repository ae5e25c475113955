"""``alkstore+`` URLs in ``celery`` commands and Flower with no app module and no import.

The ``celery.commands`` entry point (pyproject.toml, ``kombu_alkstore.celery_command``)
is loaded by the ``celery`` command at start and registers the scheme. Each process here
runs in an empty directory with no ``PYTHONPATH``: nothing but the entry point can import
kombu_alkstore. Flower comes from the test extra: a missing Flower fails, never skips.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.helpers import kill_group, wait_for


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "FLOWER_"))}
    env.pop("PYTHONPATH", None)
    env["FLOWER_UNAUTHENTICATED_API"] = "true"  # Flower 2's API answers without auth
    return env


def _celery(
    cwd: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "celery", *args],
        cwd=cwd,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _start(cwd: Path, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", *args],
        cwd=cwd,
        env=_env(),
        stdout=open(log, "wb"),  # noqa: SIM115 (closed with the process)
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _ping(cwd: Path, broker: str) -> subprocess.CompletedProcess | None:
    proc = _celery(cwd, "-b", broker, "inspect", "ping", "--timeout", "2")
    return proc if proc.returncode == 0 and "pong" in proc.stdout else None


def test_the_entry_point_names_the_command_module():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="celery.commands")}
    assert found.get("alkstore") == "kombu_alkstore.celery_command:alkstore"


def test_worker_and_inspect_ping_with_no_app_module(tmp_path):
    broker = f"alkstore+sqlite:///{tmp_path / 'broker.db'}"
    log = tmp_path / "worker.log"
    worker = _start(tmp_path, log, "-b", broker, "worker", "-P", "solo", "-n", "noapp@%h")
    try:
        proc = wait_for(lambda: worker.poll() is None and _ping(tmp_path, broker), timeout=60)
        assert "noapp@" in proc.stdout and "1 node online" in proc.stdout
        status = _celery(tmp_path, "-b", broker, "alkstore", "status")
        assert status.returncode == 0, status.stdout + status.stderr
    except AssertionError:
        raise AssertionError(log.read_text(errors="replace")) from None
    finally:
        kill_group(worker)
    assert "No such transport" not in log.read_text(errors="replace")


def test_flower_with_no_app_module_serves_workers_and_tasks(tmp_path):
    broker = f"alkstore+sqlite:///{tmp_path / 'broker.db'}"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    worker_log, flower_log = tmp_path / "worker.log", tmp_path / "flower.log"
    worker = _start(tmp_path, worker_log, "-b", broker, "worker", "-P", "solo", "-E", "-n", "fw@%h")
    flower = _start(
        tmp_path,
        flower_log,
        f"--broker={broker}",
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
    )
    try:
        wait_for(lambda: _get(f"{base}/healthcheck") == (200, "OK"), timeout=60)
        wait_for(lambda: _ping(tmp_path, broker), timeout=60)

        def workers() -> dict:
            code, body = _get(f"{base}/api/workers?refresh=1")
            return json.loads(body) if code == 200 else {}

        names = wait_for(lambda: [n for n in workers() if n.startswith("fw@")], timeout=60)
        code, page = _get(f"{base}/workers")
        assert code == 200 and "Workers" in page

        sent = _celery(tmp_path, "-b", broker, "call", "celery.accumulate", "--args", "[1, 2]")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        task_id = sent.stdout.strip()

        def task() -> dict:
            code, body = _get(f"{base}/api/tasks")
            found = json.loads(body).get(task_id, {}) if code == 200 else {}
            return found if found.get("state") == "SUCCESS" else {}

        info = wait_for(task, timeout=60)
        assert info["name"] == "celery.accumulate" and info["worker"] == names[0]
        code, page = _get(f"{base}/tasks")
        assert code == 200

        # Flower's Broker page knows RabbitMQ and Redis only (flower.utils.broker.Broker):
        # for any other transport it answers 404 "... broker is not supported".
        code, page = _get(f"{base}/broker")
        assert code == 404 and "is not supported" in page
    except AssertionError as exc:
        logs = worker_log.read_text(errors="replace") + flower_log.read_text(errors="replace")
        raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        kill_group(flower)
        kill_group(worker)
    assert "No such transport" not in flower_log.read_text(errors="replace")


def test_celery_alkstore_takes_the_apps_schema(tmp_path, pg_target):
    """``celery -A proj alkstore status`` reads the app's schema (not the default one)."""
    (tmp_path / "proj.py").write_text(
        "import kombu_alkstore  # noqa: F401\n"
        "from celery import Celery\n"
        f"app = Celery('proj', broker={pg_target.broker_url!r})\n"
        f"app.conf.broker_transport_options = {{'schema': {pg_target.schema!r}}}\n"
    )
    store = pg_target.open()
    try:
        store.enqueue("only_in_proj_schema", b"x")
    finally:
        store.close()
    proc = _celery(tmp_path, "-A", "proj", "alkstore", "status", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "only_in_proj_schema" in proc.stdout
