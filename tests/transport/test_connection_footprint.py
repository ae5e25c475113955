"""An idle worker's connections to PostgreSQL (issue 18: an idle worker host holds at most 2).

A ``celery worker`` subprocess, its connections told apart by ``application_name``: once
started it keeps its LISTEN connection and its claims connection and nothing else, over
more than one period of anything periodic it does (Celery's worker heartbeat events every
2 s, the safety-net poll, the maintenance round). Pooled connections are closed after
1 s unused here (``pool_max_idle``), so one opened now and then is seen.
"""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from tests.conftest import Target
from tests.helpers import options_env, wait_for, worker_process

pytestmark = pytest.mark.slow

#: Seconds watched once the worker is up: longer than every period of an idle worker.
WATCH = 36.0


def _connections(url: str, name: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        return conn.execute(sql, (name,)).fetchone()[0]


def test_an_idle_worker_holds_two_connections(pg_target, tmp_path):
    name = "idle-" + uuid.uuid4().hex[:10]
    sep = "&" if "?" in pg_target.url else "?"
    target = Target("postgresql", f"{pg_target.url}{sep}application_name={name}", pg_target.schema)
    env = options_env(pool_max_idle=1.0, polling_interval=2.0, sweep_interval=5.0)
    record = tmp_path / "record.tsv"
    with worker_process(target, record, "-P", "prefork", "-c", "2", **env) as proc:
        wait_for(lambda: _connections(pg_target.url, name) >= 2, 60, interval=0.2)
        time.sleep(4)  # start-up (declares, mingle) is over; its pooled connection closes
        seen = []
        end = time.monotonic() + WATCH
        while time.monotonic() < end:
            assert proc.poll() is None, "the worker exited"
            seen.append(_connections(pg_target.url, name))
            time.sleep(0.25)
    assert max(seen) <= 2, f"connections seen while idle (every 0.25 s): {seen}"
    assert min(seen) == 2, f"the LISTEN and claims connections were not both held: {seen}"
