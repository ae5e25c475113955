"""What the dashboard reads and does, through the store interface only.

Counts over whole tables (``Store.counts``: a scan of ``jobs`` and ``dead``) are taken by
one background thread every ``refresh`` seconds into a :class:`Snapshot`, so a page load
or a Prometheus scrape never waits for them and their cost does not grow with traffic.
Pages read the rest with bounded, indexed statements (peek, one page of dead letters).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cli import decode
from ..store import Store
from ..store.admin import ClaimStat, DeadFilter, RatePoint
from ..store.base import Job, QueueCounts

logger = logging.getLogger(__name__)

#: Dead letters moved or deleted per statement by a bulk action.
BULK_BATCH = 2000
#: Matching dead letters are counted up to this many on a page (then "1,000+"), so a
#: page with a text filter stops reading once that many matched.
COUNT_CAP = 1_000
#: The sampler waits at least this many times its last read between two reads, so the
#: whole-table counts cost at most about 1/(1+LOAD_FACTOR) of one database core.
LOAD_FACTOR = 5.0


@dataclass
class Snapshot:
    """The store's whole-table figures at ``taken_at`` (see the module docstring)."""

    taken_at: float = 0.0
    took: float = 0.0
    counts: list[QueueCounts] = field(default_factory=list)
    paused: dict[str, float] = field(default_factory=dict)
    claims: list[ClaimStat] = field(default_factory=list)
    rates: list[RatePoint] = field(default_factory=list)
    totals: list[RatePoint] = field(default_factory=list)
    error: str | None = None

    def queue(self, name: str) -> QueueCounts:
        for c in self.counts:
            if c.queue == name:
                return c
        return QueueCounts(name)

    def queue_names(self) -> list[str]:
        names = {c.queue for c in self.counts} | set(self.paused)
        return sorted(names)


class Sampler:
    """Refreshes the :class:`Snapshot` every ``refresh`` seconds in a daemon thread (or
    :data:`LOAD_FACTOR` times as long as the last read took, when that is longer)."""

    def __init__(self, store: Store, refresh: float = 5.0) -> None:
        self.store = store
        self.refresh = refresh
        self.snapshot = Snapshot()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> Snapshot:
        """Read the whole-table figures now (five statements) and keep them."""
        start = time.time()
        try:
            snap = Snapshot(
                taken_at=start,
                counts=self.store.counts(),
                paused=self.store.paused_queues(),
                claims=self.store.claim_stats(),
                rates=self.store.rate_points(start // 60 * 60 - 3600),
                totals=self.store.rate_totals(),
            )
            snap.took = time.time() - start
        except Exception as exc:  # the database is down: keep the last figures, say so
            logger.warning("dashboard: cannot read the store: %s", exc)
            snap = Snapshot(**{**self.snapshot.__dict__, "error": f"{type(exc).__name__}: {exc}"})
        self.snapshot = snap
        return snap

    def start(self) -> None:
        self.take()
        self._thread = threading.Thread(target=self._run, name="alkstore-web-sampler", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Refresh soon (after an action changed the figures)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(max(self.refresh, LOAD_FACTOR * self.snapshot.took))
            self._wake.clear()
            if not self._stop.is_set():
                self.take()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


# ------------------------------------------------------------------- messages
def describe(job: Job) -> dict[str, Any]:
    """A job's message decoded for display (see ``cli.decode``: JSON bodies only)."""
    d = decode(job.body)
    args = d.get("args")
    kwargs = d.get("kwargs")
    preview = ""
    if "args" in d:
        parts = [json.dumps(a, default=str) for a in (args or [])]
        parts += [f"{k}={json.dumps(v, default=str)}" for k, v in (kwargs or {}).items()]
        preview = ", ".join(parts)
    elif "payload" in d:
        preview = json.dumps(d["payload"], default=str)
    elif "body_note" in d:
        preview = d["body_note"]
    if len(preview) > 120:
        preview = preview[:119] + "…"
    return {
        "job": job,
        "task": d.get("task") or "",
        "task_id": d.get("task_id") or job.msg_id or "",
        "preview": preview,
        "eta": d.get("headers", {}).get("eta"),
        "decoded": d,
        "pretty": {
            k: json.dumps(d[k], indent=2, default=str, ensure_ascii=False)
            for k in ("args", "kwargs", "headers", "properties", "payload")
            if k in d
        },
    }


def parse_filter(params: Any) -> DeadFilter:
    """A :class:`DeadFilter` from query or form fields (``since``/``until``: ISO dates or
    epoch seconds); unknown or empty fields are ignored."""
    return DeadFilter(
        queue=(params.get("queue") or "").strip() or None,
        task=(params.get("task") or "").strip() or None,
        error=(params.get("error") or "").strip() or None,
        since=parse_time(params.get("since")),
        until=parse_time(params.get("until")),
    )


def parse_time(text: str | None) -> float | None:
    """Epoch seconds from ``2026-11-30T12:00`` (local time), ISO with an offset, or a
    number; None when empty. Raises ValueError for anything else."""
    from datetime import datetime

    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    return datetime.fromisoformat(text).timestamp()


def filter_query(where: DeadFilter) -> dict[str, str]:
    """The filter as query fields (for links that keep it)."""
    from datetime import datetime

    out = {k: getattr(where, k) for k in ("queue", "task", "error") if getattr(where, k)}
    for k in ("since", "until"):
        v = getattr(where, k)
        if v is not None:
            out[k] = datetime.fromtimestamp(v).strftime("%Y-%m-%dT%H:%M:%S")
    return out


# ------------------------------------------------------------------ bulk work
@dataclass
class BulkJob:
    """A bulk requeue or purge running in the background, with its progress."""

    id: str
    action: str  # 'requeue' | 'purge'
    where: DeadFilter
    to: str | None
    total: int
    done: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None

    @property
    def percent(self) -> int:
        return 100 if not self.total else min(100, int(self.done * 100 / self.total))


class BulkRunner:
    """Runs bulk actions over every dead letter matching a filter, batch by batch (each
    batch one statement, committed on its own), one action at a time per dashboard."""

    def __init__(self, store: Store, on_progress: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.jobs: dict[str, BulkJob] = {}
        self._lock = threading.Lock()
        self._on_progress = on_progress

    def start(self, action: str, where: DeadFilter, to: str | None = None) -> BulkJob:
        total = self.store.dead_count(where)
        job = BulkJob(uuid.uuid4().hex[:12], action, where, to, total)
        self.jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return job

    def run(self, action: str, where: DeadFilter, to: str | None = None) -> BulkJob:
        """The same, in the caller's thread (benchmarks, tests)."""
        job = BulkJob(uuid.uuid4().hex[:12], action, where, to, self.store.dead_count(where))
        self._run(job)
        return job

    def _run(self, job: BulkJob) -> None:
        with self._lock:
            try:
                after = 0
                while True:
                    ids = self.store.dead_ids(job.where, after=after, limit=BULK_BATCH)
                    if not ids:
                        break
                    after = ids[-1]
                    job.done += apply(self.store, job.action, ids, job.to)
                    self._on_progress()
            except Exception as exc:
                job.error = f"{type(exc).__name__}: {exc}"
                logger.warning("dashboard: bulk %s stopped: %s", job.action, exc)
            finally:
                job.finished = time.time()
                with contextlib.suppress(Exception):
                    self._on_progress()


def apply(store: Store, action: str, ids: list[int], to: str | None = None) -> int:
    """Requeue (to their queue or to ``to``) or purge the dead letters ``ids``."""
    if not ids:
        return 0
    if action == "purge":
        return store.dead_purge(ids=ids)
    if to:
        return store.dead_move(ids, to)
    return store.dead_requeue(ids=ids)


# ------------------------------------------------------------------ schedules
def schedules(store: Store) -> tuple[list[dict[str, Any]], set[str], str | None]:
    """The beat schedules as far as ``celery_beat_alkstore.api`` describes them, the
    actions it offers (``enable``, ``disable``, ``run_now``), and an error if unreadable."""
    try:
        from celery_beat_alkstore import api
    except Exception as exc:  # pragma: no cover - the package ships with this one
        return [], set(), f"celery_beat_alkstore unavailable: {exc}"
    actions = {name for name in ("enable", "disable", "run_now") if _api_call(api, name)}
    try:
        items = api.list_schedules(store=store)
    except Exception as exc:
        return [], actions, f"{type(exc).__name__}: {exc}"
    now = time.time()
    out = []
    for s in items:
        upcoming: list[float] = []
        with contextlib.suppress(Exception):
            upcoming = list(s.boundaries(3))
        out.append(
            {
                "name": s.name,
                "spec": getattr(s, "spec", ""),
                "tz": getattr(s, "tz", None) or getattr(s, "timezone", None) or "UTC",
                "task": s.task,
                "args": json.dumps(getattr(s, "args", []), default=str),
                "kwargs": json.dumps(getattr(s, "kwargs", {}), default=str),
                "next": [t for t in upcoming if t is not None],
                "next_local": [_in_zone(t, getattr(s, "tz", None)) for t in upcoming if t],
                "run_requested": getattr(s, "run_requested", None),
                "next_at": getattr(s, "next_at", None),
                "overdue": (getattr(s, "next_at", None) or now) < now - 60,
                "enabled": getattr(s, "enabled", True),
                "last_run_at": getattr(s, "last_run_at", None),
                "run_count": getattr(s, "run_count", None),
                "last_error": getattr(s, "last_error", None),
                "origin": getattr(s, "origin", ""),
            }
        )
    return out, actions, None


def _in_zone(ts: float, tz: str | None) -> str:
    """``ts`` as wall time in the schedule's zone (UTC when unknown)."""
    from datetime import datetime, timezone

    zone: Any = timezone.utc
    if tz:
        with contextlib.suppress(Exception):
            from zoneinfo import ZoneInfo

            zone = ZoneInfo(tz)
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


#: Names the beat API may give each action (the first found is used).
_API_NAMES = {
    "enable": ("enable_schedule", "enable"),
    "disable": ("disable_schedule", "disable"),
    "run_now": ("run_now", "run_schedule_now"),
}


def _api_call(api: Any, action: str) -> Callable[..., Any] | None:
    for name in _API_NAMES[action]:
        fn = getattr(api, name, None)
        if callable(fn):
            return fn
    return None


def schedule_action(store: Store, action: str, name: str) -> Any:
    """Run a beat API action on the schedule ``name``; LookupError if the API has none."""
    from celery_beat_alkstore import api

    fn = _api_call(api, action)
    if fn is None:
        raise LookupError(f"this celery_beat_alkstore has no {action} action")
    return fn(name, store=store)


# ------------------------------------------------------------------ consumers
class Inspector:
    """Which Celery workers hold which tasks, from Celery's remote control (``inspect
    active``/``reserved`` over this broker), refreshed in the background."""

    def __init__(self, broker_url: str, schema: str, every: float = 10.0) -> None:
        self.broker_url, self.schema, self.every = broker_url, schema, every
        self.workers: list[dict[str, Any]] = []
        self.taken_at: float | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._app: Any = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="alkstore-web-inspect", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.workers = self.poll()
                self.error = None
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
            self.taken_at = time.time()
            self._stop.wait(self.every)
        if self._app is not None:
            with contextlib.suppress(Exception):
                self._app.close()

    def poll(self) -> list[dict[str, Any]]:
        from celery import Celery

        import kombu_alkstore  # noqa: F401 - the alkstore transport alias

        if self._app is None:
            self._app = Celery("alkstore-dashboard", broker=self.broker_url, set_as_current=False)
            self._app.conf.broker_transport_options = {"schema": self.schema}
        insp = self._app.control.inspect(timeout=1.0)
        active = insp.active() or {}
        reserved = insp.reserved() or {}
        out = []
        now = time.time()
        for host in sorted(set(active) | set(reserved)):
            tasks = [*(active.get(host) or []), *(reserved.get(host) or [])]
            starts = [t.get("time_start") for t in active.get(host) or [] if t.get("time_start")]
            queues: dict[str, int] = {}
            for t in tasks:
                q = (t.get("delivery_info") or {}).get("routing_key") or "?"
                queues[q] = queues.get(q, 0) + 1
            out.append(
                {
                    "host": host,
                    "active": len(active.get(host) or []),
                    "reserved": len(reserved.get(host) or []),
                    "queues": queues,
                    "oldest_age": now - min(starts) if starts else None,
                    "tasks": [
                        {"id": t.get("id"), "name": t.get("name"), "args": str(t.get("args"))}
                        for t in tasks[:20]
                    ],
                }
            )
        return out
