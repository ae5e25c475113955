"""A worker whose host clock is skewed from the database's runs delayed tasks on time.

Due times and deadlines are stamped by the database (PostgreSQL's clock); a worker
compares them with its estimate of that clock (``Store.now``), not its own. Issue 29,
defect 8: with the worker's host 20 s ahead, its loop spun before each delayed job (324
claim rounds in 3 s); 20 s behind, a countdown ran 8 s late (at the safety poll).

The skew is real for the worker process: libfaketime (Debian's ``faketime``, which
.ci/run installs) shifts its clock; the database and the test keep the true one.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from tests.helpers import (
    make_app,
    options_env,
    parts_sum,
    read_record,
    wait_for,
    worker_process,
)

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

pytestmark = pytest.mark.timeout(120)


def _index_scans(target) -> int:
    with psycopg.connect(target.url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        scans = "coalesce(idx_scan, 0) + coalesce(seq_scan, 0)"
        return parts_sum(conn, f'"{target.schema}".jobs', scans)


@pytest.mark.parametrize("skew", ["+20s", "-20s"], ids=["ahead", "behind"])
def test_a_skewed_worker_runs_a_countdown_on_time_without_spinning(pg_target, tmp_path, skew):
    if not LIBFAKETIME.exists():
        pytest.fail(f"{LIBFAKETIME} is missing: apt-get install faketime (.ci/run does)")
    target = pg_target
    record = tmp_path / "record.txt"
    env = {
        **options_env(polling_interval=10.0),
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": skew,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
    }
    producer = make_app(target)
    with worker_process(target, record, "--pool", "threads", "-c", "2", **env):
        producer.send_task("tests.apps.proj.mark", ("warm",))
        wait_for(lambda: read_record(record), 60)
        time.sleep(1)
        scans = _index_scans(target)
        sent = time.time()
        producer.send_task("tests.apps.proj.mark", ("later",), countdown=4)
        wait_for(lambda: any(r[0] == "later" for r in read_record(record)), 30)
        ran = time.time()
        scans = _index_scans(target) - scans
    late = ran - (sent + 4)
    assert late < 1.5, f"ran {late:.1f} s late"
    # A handful of claims and due-time reads, not a spin (hundreds).
    assert scans < 60, f"{scans} scans of the jobs table in {ran - sent:.1f} s"
