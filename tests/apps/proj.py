"""A Celery app for subprocess tests (``celery -A tests.apps.proj worker``).

Configured from the environment: ``ALKSTORE_TEST_BROKER`` (broker URL),
``ALKSTORE_TEST_SCHEMA`` (store schema), ``ALKSTORE_TEST_OPTIONS`` (JSON transport
options), ``ALKSTORE_TEST_RECORD`` (a file each task run appends one line to; tasks
never touch the broker for bookkeeping).
"""

from __future__ import annotations

import json
import os
import signal
import time

from celery import Celery
from celery.exceptions import Reject

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)
from tests.apps.record import record

app = Celery(
    "proj",
    broker=os.environ.get("ALKSTORE_TEST_BROKER", "alkstore+sqlite:///proj.db"),
    backend=os.environ.get("ALKSTORE_TEST_BACKEND") or None,
)
options = {"schema": os.environ.get("ALKSTORE_TEST_SCHEMA", "alkstore")}
options.update(json.loads(os.environ.get("ALKSTORE_TEST_OPTIONS", "{}")))
app.conf.update(
    broker_transport_options=options,
    task_acks_late=os.environ.get("ALKSTORE_TEST_ACKS_LATE") == "1",
    task_reject_on_worker_lost=os.environ.get("ALKSTORE_TEST_ACKS_LATE") == "1",
    worker_prefetch_multiplier=int(os.environ.get("ALKSTORE_TEST_PREFETCH", "4")),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True)
def mark(self, key: str, sleep: float = 0.0) -> str:
    if sleep:
        time.sleep(sleep)
    record(key, os.getpid(), time.time(), self.request.hostname)
    return key


@app.task
def suicide(key: str) -> None:
    """Kills the process running it, every time (a poison message)."""
    record("suicide", key, os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


@app.task
def reject_me(key: str) -> None:
    record("reject", key)
    raise Reject("no thanks", requeue=False)


@app.task
def relay(key: str, n: int = 1) -> None:
    """A task that publishes: ``n`` ``mark`` tasks (the connection footprint of tasks
    that call ``.delay()``)."""
    for i in range(n):
        mark.delay(f"{key}-{i}")


@app.task
def mark_row(**row: object) -> None:
    """A table queue's row in row mode: its columns as keyword arguments."""
    record(f"row:{row['id']}:{row['recipient']}")
