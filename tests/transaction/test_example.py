"""The runnable example in examples/transactional, on both engines."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_example_runs_and_every_check_holds(engine, tmp_path):
    args = [sys.executable, str(ROOT / "examples" / "transactional" / "run.py")]
    prefix = f"ex_{tmp_path.name[-12:].replace('-', '_').lower()}_"
    if engine == "postgresql":
        args += ["--db", PG_URL, "--schema", f"{prefix}broker", "--prefix", prefix]
    try:
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=100)
    finally:
        if engine == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{prefix}broker" CASCADE')
                conn.execute(f'DROP TABLE IF EXISTS "{prefix}orders", "{prefix}receipts"')
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "all steps ok" in proc.stdout
    assert "FAIL" not in proc.stdout
