"""The short soak (``benchmarks/soak.py --short``) in CI, one engine per test.

Workers are SIGKILLed mid-claim, mid-task and mid-ack, pool children killed, PostgreSQL
backends terminated and a private PostgreSQL cluster restarted and crashed, the publisher
killed mid-send: no task may be lost, and every dead letter must be explained by the faults.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

SOAK = ROOT / "benchmarks" / "soak.py"


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("engine", ["pg", "sqlite"])
def test_short_soak_loses_nothing(engine, tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(SOAK), "--short", "--engine", engine, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=140,
        cwd=ROOT,
    )
    assert out.exists(), f"soak wrote no report:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    (report,) = json.loads(out.read_text())
    summary = proc.stdout
    # Faults were really injected, of every kind the engine has.
    kinds = {"kill_worker", "kill_child"}
    if engine == "pg":
        kinds |= {"terminate_backends", "restart_cluster", "crash_cluster"}
    assert kinds <= set(report["faults"]), summary
    assert sum(report["faults"].values()) >= 5, summary
    # Nothing lost: every task ran, or sits in the dead letters for a reason.
    assert report["lost"] == 0, summary
    assert report["dead_unexplained"] == [], summary
    # Explained dead letters were requeued and ran: every task ran at least once.
    assert report["ran"] == report["tasks"], summary
    assert report["leftover_rows"] == 0, summary
    assert report["unexpected_worker_exits"] == 0, summary
    if engine == "sqlite":
        assert report["integrity"] == "ok", summary
    assert proc.returncode == 0, summary
