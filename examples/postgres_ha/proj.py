"""A PostgreSQL Celery app for the beat-HA example: one periodic task, two beats.

Configured from the environment so the demo (and you) can point it anywhere:
``HA_BROKER`` (default ``alkstore+postgresql://postgres@127.0.0.1:5432/test``),
``HA_SCHEMA`` (default ``ha_demo``), ``HA_RECORD`` (file the task appends to).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from celery import Celery

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)

app = Celery(
    "proj",
    # Production: a multi-host URL so a PostgreSQL failover is a reconnect, e.g.
    # alkstore+postgresql://app_rw:pw@/app?host=db1,db2&target_session_attrs=read-write
    broker=os.environ.get("HA_BROKER", "alkstore+postgresql://postgres@127.0.0.1:5432/test"),
)
app.conf.update(
    broker_transport_options={"schema": os.environ.get("HA_SCHEMA", "ha_demo")},
    # "replay": the boundaries missed while the standby takes over each run (the default
    # policy, "once", would run them as one, as Celery's own beat does after downtime).
    beat_schedule={
        "pulse": {"task": "proj.pulse", "schedule": timedelta(seconds=1), "catch_up": "replay"}
    },
    # The scheduler lease: a standby beat takes over within this many seconds.
    beat_alkstore_lease_ttl=float(os.environ.get("HA_LEASE_TTL", "10")),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
RECORD = os.environ.get("HA_RECORD", "pulses.log")


@app.task(bind=True)
def pulse(self):
    """Records which boundary it was fired for (a header the scheduler adds)."""
    boundary = getattr(self.request, "alkstore_boundary", None)
    with open(RECORD, "a") as f:
        f.write(f"{boundary}\t{time.time()}\n")
