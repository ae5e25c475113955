"""A task's ``eta`` and ``expires`` mean the same instant whatever the publisher's zone.

Celery reads a naive datetime as UTC (``celery.utils.time.maybe_make_aware``); the broker
must store the same instant, not one read in the publishing host's local zone (issue 29,
defect 1: with ``TZ=Asia/Tokyo`` an ``expires`` 10 minutes ahead was stored 8 h in the past
and the task dead-lettered as expired; with ``TZ=America/New_York`` an ETA ran 5 h late).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT

PUBLISH = """
import json, sys
from datetime import datetime, timedelta, timezone
from celery import Celery
import kombu_alkstore

broker, schema = sys.argv[1], sys.argv[2]
app = Celery("tz", broker=broker, set_as_current=False)
app.conf.broker_transport_options = {"schema": schema}
now = datetime.now(timezone.utc).replace(tzinfo=None)  # naive UTC, as utcnow() gives
naive = app.send_task("t.naive", eta=now + timedelta(seconds=60),
                      expires=now + timedelta(minutes=10))
aware = app.send_task("t.aware", eta=datetime.now(timezone.utc) + timedelta(seconds=60))
iso = app.send_task("t.iso", countdown=60)
print(json.dumps([naive.id, aware.id, iso.id]))
app.close()
"""


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo", "UTC"])
def test_a_naive_eta_and_expires_are_utc_in_any_publisher_zone(target, zone):
    env = {"TZ": zone, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    sent = time.time()
    out = subprocess.run(
        [sys.executable, "-c", PUBLISH, target.broker_url, target.schema],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    naive, aware, iso = json.loads(out.strip().splitlines()[-1])
    with target.open() as store:
        jobs = {
            name: store.get_job(task_id)
            for name, task_id in [("naive", naive), ("aware", aware), ("iso", iso)]
        }
    for name, job in jobs.items():
        assert job is not None and job.state == "pending", (name, job)
        # 60 s after sending, within the time the subprocess took to start and publish.
        assert sent + 55 < job.run_at < time.time() + 65, (zone, name, job.run_at - sent)
    expires = jobs["naive"].expires_at
    assert sent + 595 < expires < time.time() + 605, (zone, expires - sent)
