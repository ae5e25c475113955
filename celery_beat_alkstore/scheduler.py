"""The beat Scheduler: ``@every`` schedules in the store, each boundary fired once.

``celery -A proj beat -S alkstore`` (or ``-S celery_beat_alkstore:Scheduler``).

Each tick, the beat holding the lease ``__alkstore_scheduler`` opens one store
transaction, renews the lease in it, locks the due schedule rows (rows another ticker
holds are skipped), and for each due boundary advances ``next_at`` by exactly one interval
(guarded by the previous ``next_at``) and publishes the task. When the broker is the
alkstore transport on the same database, the publish joins that transaction: fire and
advance commit together, and a crash before the commit refires the boundary. With
another broker the message is published before the commit (at-least-once: a crash
between the two refires the boundary).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from typing import Any

import psycopg
from celery import beat
from celery.utils.log import get_logger
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.json import loads

from kombu_alkstore.errors import (
    AlkstoreError,
    ConfigurationError,
    SchemaMissing,
    StoreUnavailable,
)

from .api import (
    LEASE_NAME,
    ORIGIN_CONFIG,
    Schedule,
    StoreTarget,
    make_row,
    store_target,
)

logger = get_logger(__name__)

#: Missed boundaries replayed per schedule per tick; the rest are skipped (logged).
CATCH_UP_LIMIT = 64
DEFAULT_LEASE_TTL = 10.0
#: Environment hook for tests: exit the process after a fire's enqueue, before commit.
CRASH_HOOK = "ALKSTORE_BEAT_CRASH_AFTER_ENQUEUE"

#: The store or the broker cannot be reached: no schedule is to blame.
UNAVAILABLE = (
    StoreUnavailable,
    psycopg.Error,
    sqlite3.Error,
    KombuOperationalError,
    OSError,
)
#: Errors of the store or the broker that a later tick may get past.
TRANSIENT = (AlkstoreError, *UNAVAILABLE)


class _FireFailed(Exception):
    def __init__(self, name: str, exc: BaseException) -> None:
        super().__init__(name, exc)
        self.name, self.exc = name, exc


class Scheduler(beat.Scheduler):
    """A ``celery.beat.Scheduler`` keeping its schedules in the alkstore store.

    Settings: ``beat_alkstore_url`` (the store when the broker is not alkstore),
    ``beat_alkstore_options`` (its store options, e.g. ``{"schema": "app"}``),
    ``beat_alkstore_lease_ttl`` (seconds, default 10), ``beat_max_loop_interval``.
    """

    #: Never sync: every change is written to the store when it happens.
    sync_every = float("inf")

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:
            self.lease_ttl = _lease_ttl(app.conf.get("beat_alkstore_lease_ttl"))
        except ConfigurationError as exc:
            if not kwargs.get("lazy"):
                raise SystemExit(f"celery beat (alkstore scheduler): {exc}") from None
            self.lease_ttl = DEFAULT_LEASE_TTL
        self.target: StoreTarget | None = None
        self.store: Any = None
        self.leader = False
        self._failing: dict[str, float] = {}
        self._last_error = 0.0
        super().__init__(app, *args, **kwargs)

    # ------------------------------------------------------------------ setup
    def setup_schedule(self) -> None:
        """Validate ``beat_schedule`` (refusing the start on any bad entry, before the
        store is touched), then upsert it and drop config entries no longer in it."""
        try:
            rows = self._config_rows()
            self.target = store_target(self.app)
            self.store = self.target.open()
        except (ConfigurationError, StoreUnavailable, SchemaMissing) as exc:
            raise SystemExit(f"celery beat (alkstore scheduler): {exc}") from None
        names = {row.name for row in rows}
        for row in rows:
            self.store.schedule_upsert(row, keep_grid=True)
        for stored in self.store.schedule_list():
            gone = stored.origin == ORIGIN_CONFIG and stored.name not in names
            if gone and self.store.schedule_delete(stored.name):
                logger.info("beat: removed schedule %r (no longer in beat_schedule)", stored.name)
        logger.info(
            "beat: %d schedule(s) from beat_schedule stored in %s (schema %r); %s",
            len(rows),
            self.target.url.masked(),
            self.target.options.schema,
            "fire and advance commit together"
            if self.target.same_database
            else "broker is another system: publish, then commit (at-least-once)",
        )

    def _config_rows(self) -> list:
        entries = dict(self.app.conf.beat_schedule or {})
        rows = []
        for name, entry in sorted(entries.items()):
            if not isinstance(entry, dict):
                raise ConfigurationError(
                    f"beat_schedule entry {name!r} must be a dict, got {type(entry).__name__}"
                )
            if "schedule" not in entry or "task" not in entry:
                raise ConfigurationError(
                    f"beat_schedule entry {name!r} needs 'task' and 'schedule'"
                )
            rows.append(
                make_row(
                    name,
                    entry["schedule"],
                    entry["task"],
                    entry.get("args") or (),
                    entry.get("kwargs") or {},
                    entry.get("options") or {},
                    origin=ORIGIN_CONFIG,
                    what="beat_schedule entry",
                )
            )
        if self.app.conf.result_expires and "celery.backend_cleanup" not in entries:
            try:
                supports = self.app.backend.supports_autoexpire
            except Exception:  # an unloadable backend: nothing to clean up here
                supports = True
            if not supports:
                # Celery's default is a daily crontab; alkstore schedules are intervals.
                rows.append(
                    make_row(
                        "celery.backend_cleanup",
                        "@every 1d",
                        "celery.backend_cleanup",
                        options={"expires": 12 * 3600},
                        origin=ORIGIN_CONFIG,
                    )
                )
        return rows

    def install_default_entries(self, data: Any) -> None:
        """Handled by :meth:`_config_rows` (as an ``@every 1d`` schedule)."""

    # ------------------------------------------------------------ the schedule
    def get_schedule(self) -> dict[str, beat.ScheduleEntry]:
        """The stored schedules as beat entries (for introspection only)."""
        if self.store is None:
            return {}
        from celery.schedules import schedule as interval_schedule

        out = {}
        for s in self._list():
            out[s.name] = self.Entry(
                name=s.name,
                task=s.task,
                schedule=interval_schedule(s.interval, app=self.app),
                args=s.args,
                kwargs=s.kwargs,
                options=s.options,
                app=self.app,
            )
        return out

    def set_schedule(self, schedule: Any) -> None:
        self.data = schedule

    schedule = property(get_schedule, set_schedule)

    def _list(self) -> list[Schedule]:
        return [Schedule.from_row(r) for r in self.store.schedule_list()]

    # -------------------------------------------------------------------- tick
    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass: renew leadership, fire what is due; return the seconds to sleep."""
        try:
            return self._tick()
        except _FireFailed as failed:
            backoff = min(self.max_interval, 5.0)
            self._failing[failed.name] = time.monotonic() + backoff
            logger.error(
                "beat: schedule %r could not be fired (%s: %s); the tick was rolled back, "
                "retrying it in %.1f s",
                failed.name,
                type(failed.exc).__name__,
                failed.exc,
                backoff,
                exc_info=failed.exc,
            )
            return 0.0
        except TRANSIENT as exc:
            self.leader = False
            delay = min(self.max_interval, 1.0)
            now = time.monotonic()
            if now - self._last_error > 30:
                logger.error("beat: tick failed (%s: %s)", type(exc).__name__, exc, exc_info=True)
            else:
                logger.warning("beat: tick failed (%s: %s)", type(exc).__name__, exc)
            self._last_error = now
            return delay

    def _standby_interval(self) -> float:
        return max(0.05, min(self.max_interval, 1.0, self.lease_ttl / 4))

    def _tick(self) -> float:
        store = self.store
        if not self.leader:
            if not store.lease_acquire(LEASE_NAME, self.owner, self.lease_ttl):
                return self._standby_interval()
            logger.info("beat: %s holds the scheduler lease; ticking", self.owner)
            self.leader = True
        producer = self.producer  # connect before the transaction, never inside it
        crash = os.environ.get(CRASH_HOOK) == "1"
        now = time.time()
        with store.schedule_tick() as tx:
            # Renewed inside the tick's transaction: the fires commit only with the lease.
            if not store.lease_acquire(LEASE_NAME, self.owner, self.lease_ttl):
                self.leader = False
                logger.warning(
                    "beat: lost the scheduler lease (held by %s); standing by",
                    store.lease_holder(LEASE_NAME),
                )
                return self._standby_interval()
            for row in tx.due(now):
                retry_at = self._failing.get(row.name)
                if retry_at is not None:
                    if time.monotonic() < retry_at:
                        continue
                    del self._failing[row.name]
                self._fire_due(tx, row, now, producer, crash)
            rows = store.schedule_list()
        return self._sleep_for(rows)

    def _fire_due(self, tx: Any, row: Any, now: float, producer: Any, crash: bool) -> None:
        interval = row.interval
        boundary = row.next_at
        fired = 0
        while boundary <= now and fired < CATCH_UP_LIMIT:
            new = boundary + interval
            if not tx.advance(row.name, boundary, new):
                return  # another ticker advanced it: never fire twice
            try:
                self._publish(row, boundary, producer)
            except UNAVAILABLE:
                raise  # the store or the broker, not this schedule: retry the tick
            except Exception as exc:
                raise _FireFailed(row.name, exc) from exc
            fired += 1
            if crash:
                logger.critical(
                    "beat: %s=1: exiting after the enqueue of %r boundary %r, before commit",
                    CRASH_HOOK,
                    row.name,
                    boundary,
                )
                for handler in _all_handlers():
                    handler.flush()
                os._exit(1)
            boundary = new
        if boundary <= now:
            skipped = int((now - boundary) // interval) + 1
            new = boundary + skipped * interval
            if tx.advance(row.name, boundary, new):
                logger.warning(
                    "beat: schedule %r was %d boundaries behind: fired %d, skipped %d "
                    "(boundaries %r to %r); next at %r",
                    row.name,
                    fired + skipped,
                    fired,
                    skipped,
                    boundary,
                    new - interval,
                    new,
                )
        elif fired > 1:
            logger.info("beat: schedule %r caught up %d missed boundaries", row.name, fired - 1)

    def _publish(self, row: Any, boundary: float, producer: Any) -> None:
        options = dict(loads(row.options))
        headers = dict(options.pop("headers", None) or {})
        headers.update(
            celery_beat_task=True, alkstore_schedule=row.name, alkstore_boundary=boundary
        )
        options["headers"] = headers
        if self.target is not None and self.target.same_database:
            # Inside the tick's transaction a retry cannot succeed: fail the tick instead.
            options.setdefault("retry", False)
        logger.info("beat: sending %r (%s) for boundary %r", row.name, row.task, boundary)
        args, kwargs = loads(row.args), loads(row.kwargs)
        task = self.app.tasks.get(row.task)
        if task is not None:  # as Celery's beat does: the task's own options apply
            task.apply_async(args, kwargs, producer=producer, **options)
        else:
            self.app.send_task(row.task, args, kwargs, producer=producer, **options)

    def _sleep_for(self, rows: list) -> float:
        now = time.time()
        clock = time.monotonic()
        self._failing = {n: at for n, at in self._failing.items() if at > clock}
        limit = min(self.max_interval, self.lease_ttl / 3)
        waits = []
        for row in rows:
            retry_at = self._failing.get(row.name)
            if retry_at is not None:
                waits.append(retry_at - clock)
            elif row.next_at <= now:
                waits.append(0.05)  # due but locked by another ticker: look again soon
            else:
                waits.append(row.next_at - now)
        return max(0.0, min([limit, *waits]))

    # ---------------------------------------------------------------- shutdown
    def close(self) -> None:
        try:
            if self.leader and self.store is not None:
                self.leader = False
                try:
                    self.store.lease_release(LEASE_NAME, self.owner)
                except TRANSIENT as exc:
                    logger.warning("beat: could not release the scheduler lease: %s", exc)
        finally:
            super().close()

    @property
    def info(self) -> str:
        try:
            target = self.target or store_target(self.app)
        except Exception as exc:  # the banner must not fail: the start reports it
            return f"    . store -> ? ({exc})"
        return (
            f"    . store -> {target.url.masked()} (schema {target.options.schema!r})\n"
            f"    . lease -> {LEASE_NAME} (TTL {self.lease_ttl:g}s)"
        )


def _lease_ttl(value: Any) -> float:
    if value is None:
        return DEFAULT_LEASE_TTL
    try:
        ttl = float(value)
    except (TypeError, ValueError):
        ttl = -1.0
    if isinstance(value, bool) or not ttl > 0:
        raise ConfigurationError(
            f"setting beat_alkstore_lease_ttl must be a positive number of seconds, got {value!r}"
        )
    return ttl


def _all_handlers() -> list:
    import logging

    seen = []
    for logger_ in (logging.getLogger(), logger):
        seen.extend(logger_.handlers)
    return seen
