"""celery-beat-alkstore: a Celery beat scheduler keeping ``@every`` and cron schedules in the
store.

``celery -A proj beat -S alkstore`` (or ``-S celery_beat_alkstore:Scheduler``). Any number
of beats may run: one holds the lease and ticks, and each boundary is fired once per
elapsed boundary (at-least-once across crashes), see ``docs/beat.md``.

The API works on the store an app's beat uses, or on a store passed as ``store=``::

    from celery_beat_alkstore import schedule, unschedule, list_schedules
    schedule("report", "@every 1h", "proj.tasks.report", kwargs={"full": True}, app=app)
"""

from __future__ import annotations

from typing import Any

from .api import (
    LEASE_NAME,
    Schedule,
    disable,
    enable,
    first_boundary,
    get_schedule,
    list_schedules,
    run_now,
    schedule,
    store_target,
    unschedule,
    upcoming,
)
from .spec import GRAMMAR, Spec, format_spec, parse_spec

__all__ = [
    "GRAMMAR",
    "LEASE_NAME",
    "Schedule",
    "Scheduler",
    "Spec",
    "disable",
    "enable",
    "first_boundary",
    "format_spec",
    "get_schedule",
    "list_schedules",
    "parse_spec",
    "run_now",
    "schedule",
    "store_target",
    "unschedule",
    "upcoming",
]


def __getattr__(name: str) -> Any:
    if name == "Scheduler":  # imported lazily: the CLI does not need celery.beat
        from .scheduler import Scheduler

        return Scheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
