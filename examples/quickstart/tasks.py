"""The quickstart's Celery app: ordinary task code on the alkstore broker.

The only alkstore-specific lines are the import and the broker URL. The broker is an
SQLite file (the embedded default); for PostgreSQL use
``alkstore+postgresql://user:password@host/dbname`` instead.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from celery import Celery
from celery.exceptions import Reject

import kombu_alkstore  # noqa: F401  (registers the "alkstore" transport with kombu)

app = Celery(
    "quickstart",
    broker=os.environ.get("QUICKSTART_BROKER", "alkstore+sqlite:///quickstart.db"),
    backend="rpc://",  # results travel back through the same broker
)
app.conf.update(
    # beat: run `tick` every 2 seconds (stored as "@every 2s" in the broker's database)
    beat_schedule={"tick": {"task": "tasks.tick", "schedule": timedelta(seconds=2)}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
TICKS = os.environ.get("QUICKSTART_TICKS", "ticks.log")


@app.task
def add(x, y):
    return x + y


@app.task
def now():
    """Returns when it ran (to show that a countdown task ran when it was due)."""
    return time.time()


@app.task
def tick():
    """The periodic task: appends the time it ran to a file the runner watches."""
    with open(TICKS, "a") as f:
        f.write(f"{time.time()}\n")
    return "tick"


@app.task(acks_late=True)  # Reject needs a message that is acked only after the task
def broken(order_id):
    """Refuses its message: it goes to the dead letters (see `kombu-alkstore dead list`)."""
    raise Reject(f"order {order_id} is malformed", requeue=False)
