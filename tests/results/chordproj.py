"""A Celery app for the result-backend subprocess tests
(``celery -A tests.results.chordproj worker``): broker and results both alkstore, in the
broker's database (``result_backend = "alkstore://"``), late acks.

Configured as ``tests.apps.proj``: ``ALKSTORE_TEST_BROKER``, ``ALKSTORE_TEST_SCHEMA``,
``ALKSTORE_TEST_OPTIONS`` (JSON transport options), ``ALKSTORE_TEST_RECORD`` (each task
run appends a line to it).
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery

from tests.apps.record import record

app = Celery(
    "chordproj",
    broker=os.environ.get("ALKSTORE_TEST_BROKER", "alkstore+sqlite:///chordproj.db"),
    backend="alkstore://",
)
options = {"schema": os.environ.get("ALKSTORE_TEST_SCHEMA", "alkstore")}
options.update(json.loads(os.environ.get("ALKSTORE_TEST_OPTIONS", "{}")))
app.conf.update(
    broker_transport_options=options,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="chordproj.part")
def part(i: int, sleep: float) -> int:
    time.sleep(sleep)
    record("part", i, os.getpid())
    return i


@app.task(name="chordproj.total")
def total(values: list[int]) -> int:
    record("callback", len(values), sum(values), os.getpid())
    return sum(values)
