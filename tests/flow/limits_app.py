"""A Celery app for the concurrency-limit worker tests (``celery -A
tests.flow.limits_app worker``), configured from the environment as tests/apps/proj.py.

``span`` records its start and end (time, pid, host) in the record file, never through
the broker under test, so the test can measure how many ran at once.
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)
from tests.apps.record import record

app = Celery(
    "limits",
    broker=os.environ.get("ALKSTORE_TEST_BROKER", "alkstore+sqlite:///limits.db"),
    backend=None,
)
options = {"schema": os.environ.get("ALKSTORE_TEST_SCHEMA", "alkstore")}
options.update(json.loads(os.environ.get("ALKSTORE_TEST_OPTIONS", "{}")))
app.conf.update(
    broker_transport_options=options,
    task_acks_late=True,  # the claim covers the run: the limit bounds running tasks
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=int(os.environ.get("ALKSTORE_TEST_PREFETCH", "4")),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True, name="limits.span")
def span(self, n: int, key: str, duration: float) -> int:
    """Run for ``duration`` seconds; record start and end."""
    host = self.request.hostname
    record("start", n, key, time.time(), os.getpid(), host)
    time.sleep(duration)
    record("end", n, key, time.time(), os.getpid(), host)
    return n
