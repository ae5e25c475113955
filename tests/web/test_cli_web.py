"""``kombu-alkstore web``: the dashboard as a process, as an operator starts it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

from tests.helpers import ROOT, kill_group
from tests.web.conftest import free_port


def test_web_command_serves_the_dashboard_and_metrics(pg_target, tmp_path):
    store = pg_target.open()
    store.enqueue("cliq", b"1")
    store.close()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    port = free_port()
    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kombu_alkstore",
            "-b",
            pg_target.broker_url,
            "--schema",
            pg_target.schema,
            "web",
            "--port",
            str(port),
            "--token-file",
            str(token),
            "--no-inspect",
            "--refresh",
            "0.5",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    page = r.read().decode()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "web.log").read_text()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.2)
        assert 'data-queue="cliq"' in page and "log in" in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'alkstore_queue_messages{queue="cliq",state="pending"} 1.0' in text
        # An action with the token and the page's CSRF token is done and logged.
        auth = {"Authorization": "Bearer s3cret"}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/queues/cliq", headers=auth)
        with urllib.request.urlopen(req, timeout=5) as r:
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', r.read().decode()).group(1)
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/queues/cliq/pause",
            data=f"csrf={csrf}".encode(),
            headers=auth,
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert "paused since" in r.read().decode()
    finally:
        kill_group(proc)
        log.close()
    logged = (tmp_path / "web.log").read_text()
    assert "write access with the token" in logged
    assert "audit 127.0.0.1: queue cliq paused" in logged
