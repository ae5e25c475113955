"""The schedules page's rows and actions, calling :mod:`celery_beat_alkstore.api` (the
same functions ``celery-beat-alkstore list|enable|disable|run-now`` calls)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from celery_beat_alkstore import api

from ..store import Store

#: The actions the page offers on a schedule, each the beat API function of that name.
ACTIONS: dict[str, Callable[..., bool]] = {
    "enable": api.enable,
    "disable": api.disable,
    "run_now": api.run_now,
}
#: Upcoming boundaries the page shows per schedule.
UPCOMING = 3


def schedule_rows(store: Store) -> tuple[list[dict[str, Any]], str | None]:
    """Every beat schedule in ``store`` (``api.list_schedules``) as a row for the page,
    by name, and None; or no rows and the error when the schedules cannot be read."""
    try:
        items = api.list_schedules(store=store)
    except Exception as exc:
        return [], f"{type(exc).__name__}: {exc}"
    now = time.time()
    return [_row(s, now) for s in items], None


def _row(s: api.Schedule, now: float) -> dict[str, Any]:
    upcoming: list[float] = []
    with contextlib.suppress(Exception):  # a spec this version cannot read: no boundaries
        upcoming = list(s.boundaries(UPCOMING))
    return {
        "name": s.name,
        "spec": s.spec,
        "tz": s.tz or "UTC",
        "task": s.task,
        "args": json.dumps(s.args, default=str),
        "kwargs": json.dumps(s.kwargs, default=str),
        "next": [t for t in upcoming if t is not None],
        "next_local": [_in_zone(t, s.tz) for t in upcoming if t],
        "run_requested": s.run_requested,
        "next_at": s.next_at,
        "overdue": (s.next_at or now) < now - 60,
        "enabled": s.enabled,
        "last_run_at": s.last_run_at,
        "run_count": s.run_count,
        "last_error": s.last_error,
        "origin": s.origin,
        "catch_up": s.catch_up or "default",
        "no_stacking": s.no_stacking,
        "skipped": s.skipped,
    }


def _in_zone(ts: float, tz: str | None) -> str:
    """``ts`` as wall time in the schedule's zone (UTC when unknown)."""
    zone: Any = timezone.utc
    if tz:
        with contextlib.suppress(Exception):
            from zoneinfo import ZoneInfo

            zone = ZoneInfo(tz)
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def run_action(store: Store, action: str, name: str) -> bool:
    """Run the beat API's ``action`` (a key of :data:`ACTIONS`) on the schedule ``name``
    in ``store``; what the API answers (False: no such schedule). LookupError for an
    action not in :data:`ACTIONS`; the API's own errors propagate."""
    fn = ACTIONS.get(action)
    if fn is None:
        raise LookupError(f"no schedule action {action!r}")
    return fn(name, store=store)
