"""Django (optional extra): ``kombu_alkstore.django`` on SQLite and on PostgreSQL, with a
real worker, each run in its own process so the Django settings stay isolated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytest.importorskip("django")  # the [django] extra; the [test] extra installs it

pytestmark = pytest.mark.timeout(180)


def test_django_atomic_commits_and_rolls_back_the_tasks(target):
    with target.open():  # the broker's tables (and schema) exist before Django connects
        pass
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.transaction.django_scenarios",
            target.engine,
            target.broker_url,
            target.schema,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    ran = sorted(result["ran"])
    assert ran == [
        ["bound-first", True],
        ["committed", True],
        ["decorated", True],
        ["outer", True],
    ], result
    assert "outside transaction.atomic()" in result["errors"]["outside"]
    assert "outside transaction.atomic()" in result["errors"]["after"]
