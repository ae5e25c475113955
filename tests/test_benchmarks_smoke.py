"""``python -m benchmarks --quick`` runs end to end (a smoke test: no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_quick_benchmark_runs_and_reports_rows(tmp_path):
    results = tmp_path / "samples.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)]
        + ["--json", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    outcomes = json.loads(results.read_text())
    assert not [o for o in outcomes if o["failed"]], outcomes
    measured = {(o["broker"], o["pool"]) for o in outcomes if o["values"]}
    for broker in ("alkstore-sqlite", "alkstore-postgresql"):
        for pool in ("prefork", "threads"):
            assert (broker, pool) in measured, measured
    session = next(o for o in outcomes if o["broker"] == "alkstore-postgresql")
    assert {"publish", "drain", "p50", "p99", "idle_cpu", "idle_stmts"} <= set(session["values"])
    assert any(o["broker"].startswith("scale: ") and o["values"] for o in outcomes)

    md = (tmp_path / "benchmarks.md").read_text()
    assert "| alkstore-postgresql | prefork |" in md
    assert "| alkstore-sqlite | threads |" in md
    assert "benchmarks:begin" in md and "benchmarks:end" in md
