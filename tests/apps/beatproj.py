"""A Celery app for beat tests (``celery -A tests.apps.beatproj beat -S alkstore``).

Configured from the environment like ``tests.apps.proj``: ``ALKSTORE_TEST_BROKER``,
``ALKSTORE_TEST_SCHEMA``, ``ALKSTORE_TEST_OPTIONS`` (JSON transport options),
``ALKSTORE_TEST_RECORD`` (the file each task run appends one line to), plus
``ALKSTORE_BEAT_SCHEDULE`` (JSON ``{name: {"schedule": seconds-or-spec, "task": …}}``),
``ALKSTORE_BEAT_CRONTAB=<name>`` (adds a ``crontab(minute="*")`` entry of that name, in
``ALKSTORE_BEAT_TIMEZONE`` when set), ``ALKSTORE_BEAT_SCHEDULER`` (the ``beat_scheduler``
setting), ``ALKSTORE_BEAT_CATCH_UP`` (``beat_alkstore_catch_up``),
``ALKSTORE_BEAT_LEASE_TTL``, and ``ALKSTORE_BEAT_MAX_INTERVAL``.
``-S tests.apps.beatproj:CrashingScheduler`` is the beat that exits right after its first
fire's publish, before the tick commits.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from celery import Celery
from celery.schedules import crontab

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)
from celery_beat_alkstore.scheduler import Scheduler
from tests.apps.record import record

app = Celery(
    "beatproj", broker=os.environ.get("ALKSTORE_TEST_BROKER", "alkstore+sqlite:///beatproj.db")
)
options = {"schema": os.environ.get("ALKSTORE_TEST_SCHEMA", "alkstore")}
options.update(json.loads(os.environ.get("ALKSTORE_TEST_OPTIONS", "{}")))

schedule = json.loads(os.environ.get("ALKSTORE_BEAT_SCHEDULE", "{}"))
if os.environ.get("ALKSTORE_BEAT_CRONTAB"):
    schedule[os.environ["ALKSTORE_BEAT_CRONTAB"]] = {
        "task": "tests.apps.beatproj.stamp",
        "schedule": crontab(minute="*"),
    }
if os.environ.get("ALKSTORE_BEAT_TIMEZONE"):
    app.conf.timezone = os.environ["ALKSTORE_BEAT_TIMEZONE"]
if os.environ.get("ALKSTORE_BEAT_CATCH_UP"):  # the beat's default catch-up policy
    app.conf.beat_alkstore_catch_up = os.environ["ALKSTORE_BEAT_CATCH_UP"]
if os.environ.get("ALKSTORE_BEAT_SCHEDULER"):  # e.g. "alkstore": beat_scheduler, not -S
    app.conf.beat_scheduler = os.environ["ALKSTORE_BEAT_SCHEDULER"]

app.conf.update(
    broker_transport_options=options,
    beat_schedule=schedule,
    beat_alkstore_lease_ttl=float(os.environ.get("ALKSTORE_BEAT_LEASE_TTL", "3")),
    beat_max_loop_interval=float(os.environ.get("ALKSTORE_BEAT_MAX_INTERVAL", "1")),
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=4,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True)
def stamp(self, *args: object, **kwargs: object) -> None:
    """Record ``schedule, boundary, start time, pid, arguments, task id`` for one run
    (boundary from headers; the task id tells a fire from a delivery of it again)."""
    started = time.time()
    request = self.request
    record(
        getattr(request, "alkstore_schedule", None),
        getattr(request, "alkstore_boundary", None),
        repr(started),
        os.getpid(),
        json.dumps([list(args), kwargs]),
        request.id,
    )


@app.task(bind=True, acks_late=True)
def slow(self, seconds: float = 3.0) -> None:
    """Record ``schedule, boundary, start, end, pid`` after sleeping ``seconds``; acked
    late, so its job stays claimed (live) while it runs."""
    started = time.time()
    time.sleep(seconds)
    request = self.request
    record(
        getattr(request, "alkstore_schedule", None),
        getattr(request, "alkstore_boundary", None),
        repr(started),
        repr(time.time()),
        os.getpid(),
    )


class CrashingScheduler(Scheduler):
    """Exits (status 1) right after its first fire's publish, before the tick commits."""

    def _publish(self, row: Any, boundary: float, producer: Any, run_now: bool = False) -> None:
        super()._publish(row, boundary, producer, run_now)
        logging.getLogger(__name__).critical(
            "crashing after the enqueue of %r boundary %r, before commit", row.name, boundary
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)
