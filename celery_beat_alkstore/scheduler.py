"""The beat Scheduler: ``@every`` and cron schedules in the store, each boundary fired once.

``celery -A proj beat -S alkstore`` (or ``-S celery_beat_alkstore:Scheduler``, or the
setting ``beat_scheduler = "alkstore"``, which ``celery worker -B`` reads too).

Each tick, the beat holding the lease ``__alkstore_scheduler`` opens one store
transaction, renews the lease in it, reads the database's clock, locks the due schedule
rows (rows another ticker holds are skipped), and for each due boundary advances
``next_at`` from that boundary to the next one (guarded by the boundary) and publishes
the task. Each schedule's fires run in a savepoint: one schedule that cannot be fired
is rolled back alone (its error stored), the others' fires stay and commit. When the
broker is the alkstore transport on the same database, the publish joins that
transaction: fire and advance commit together, and a crash before the commit refires
the boundary. With another broker the message is published before the commit
(at-least-once: a crash between the two refires the boundary).

Several boundaries due at once (downtime) follow the schedule's catch-up policy (``once``
by default, ``replay``, ``skip``: :mod:`.policy`); a schedule with no stacking skips a due
time while the job of its previous run is still in the jobs table (one primary-key read).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import replace
from typing import Any

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
from kombu_alkstore.store import ScheduleRow, connection_errors, database_errors

from .api import (
    LEASE_NAME,
    ORIGIN_CONFIG,
    Schedule,
    StoreTarget,
    app_timezone,
    make_row,
    store_target,
)
from .cron import utc_iso
from .policy import CATCH_UP_LIMIT, ONCE, REPLAY, default_catch_up, split
from .spec import GRAMMAR, KIND_CRON, row_spec

logger = get_logger(__name__)

__all__ = ["CATCH_UP_LIMIT", "Scheduler"]
DEFAULT_LEASE_TTL = 10.0
#: A schedule that could not be fired is retried after this long (seconds, at most).
FAILED_RETRY = 5.0
#: A schedule whose stored spec cannot be read is looked at again after this long.
BAD_SPEC_RETRY = 60.0

#: The store or the broker cannot be reached: no schedule is to blame, the tick stops.
UNAVAILABLE = (*connection_errors(), KombuOperationalError, OSError)
#: Errors of the store or the broker that a later tick may get past.
TRANSIENT = (AlkstoreError, *database_errors(), *UNAVAILABLE)


class Scheduler(beat.Scheduler):
    """A ``celery.beat.Scheduler`` keeping its schedules in the alkstore store.

    Settings: ``beat_alkstore_url`` (the store when the broker is not alkstore),
    ``beat_alkstore_options`` (its store options, e.g. ``{"schema": "app"}``),
    ``beat_alkstore_lease_ttl`` (seconds, default 10), ``beat_alkstore_catch_up``
    (``once``, ``replay`` or ``skip``; default ``once``), ``beat_max_loop_interval``.
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
        try:
            #: The catch-up policy of schedules that name none (``beat_alkstore_catch_up``).
            self.catch_up = default_catch_up(app)
        except ConfigurationError as exc:
            if not kwargs.get("lazy"):
                raise SystemExit(f"celery beat (alkstore scheduler): {exc}") from None
            self.catch_up = ONCE
        self.target: StoreTarget | None = None
        self.store: Any = None
        self.leader = False
        self._failing: dict[str, float] = {}
        self._warned: set[str] = set()
        self._last_error = 0.0
        #: The database's clock minus this host's, as of the last tick.
        self._skew = 0.0
        self.default_tz = "UTC"
        super().__init__(app, *args, **kwargs)

    # ------------------------------------------------------------------ setup
    def setup_schedule(self) -> None:
        """Validate ``beat_schedule`` (refusing the start on any bad entry, before the
        store is touched), then upsert it and drop config entries no longer in it."""
        try:
            self.default_tz = app_timezone(self.app)
            rows = self._config_rows()
            self.target = store_target(self.app)
            self.store = self.target.open()
        except (ConfigurationError, StoreUnavailable, SchemaMissing) as exc:
            logger.error("beat (alkstore scheduler): %s", exc)
            raise SystemExit(f"celery beat (alkstore scheduler): {exc}") from None
        names = {row.name for row in rows}
        now = self.store.schedule_clock()
        for row in rows:
            self.store.schedule_upsert(replace(row, next_at=self._first(row, now)), keep_grid=True)
        for stored in self.store.schedule_list():
            gone = stored.origin == ORIGIN_CONFIG and stored.name not in names
            if gone and self.store.schedule_delete(stored.name):
                logger.info("beat: removed schedule %r (no longer in beat_schedule)", stored.name)
                continue
            if stored.task not in self.app.tasks:
                logger.warning(
                    "beat: schedule %r: task %r is not registered in app %r; it is sent by "
                    "name (check the name, or that the worker defines it)",
                    stored.name,
                    stored.task,
                    self.app.main,
                )
        logger.info(
            "beat: %d schedule(s) from beat_schedule stored in %s (schema %r), cron read in "
            "%s unless a schedule names its zone, catch-up %r unless it names one; %s",
            len(rows),
            self.target.url.masked(),
            self.target.options.schema,
            self.default_tz,
            self.catch_up,
            "fire and advance commit together"
            if self.target.same_database
            else "broker is another system: publish, then commit (at-least-once)",
        )

    @staticmethod
    def _first(row: ScheduleRow, now: float) -> float:
        """A new row's first boundary after the database's clock."""
        return row_spec(row.kind, row.spec, row.interval, row.tz).first_after(now)

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
                    tz=entry.get("tz"),
                    default_tz=self.default_tz,
                    catch_up=entry.get("catch_up"),
                    no_stacking=entry.get("no_stacking"),
                )
            )
        if self.app.conf.result_expires and "celery.backend_cleanup" not in entries:
            try:
                supports = self.app.backend.supports_autoexpire
            except Exception:  # an unloadable backend: nothing to clean up here
                supports = True
            if not supports:
                # Celery's default entry: daily at 04:00 in the app's zone.
                rows.append(
                    make_row(
                        "celery.backend_cleanup",
                        "cron 0 4 * * *",
                        "celery.backend_cleanup",
                        options={"expires": 12 * 3600},
                        origin=ORIGIN_CONFIG,
                        default_tz=self.default_tz,
                    )
                )
        return rows

    def install_default_entries(self, data: Any) -> None:
        """Handled by :meth:`_config_rows` (``celery.backend_cleanup``, as Celery's)."""

    # ------------------------------------------------------------ the schedule
    def get_schedule(self) -> dict[str, beat.ScheduleEntry]:
        """The stored schedules as beat entries (for introspection only)."""
        if self.store is None:
            return {}
        from celery.schedules import crontab
        from celery.schedules import schedule as interval_schedule

        out = {}
        for s in self._list():
            if s.kind == KIND_CRON:
                fields = s.spec.split()[1:]
                sched: Any = crontab(*fields[:2], fields[4], fields[2], fields[3], app=self.app)
            else:
                sched = interval_schedule(s.interval, app=self.app)
            out[s.name] = self.Entry(
                name=s.name,
                task=s.task,
                schedule=sched,
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
        stopped: BaseException | None = None
        with store.schedule_tick() as tx:
            # Renewed inside the tick's transaction: the fires commit only with the lease.
            if not store.lease_acquire(LEASE_NAME, self.owner, self.lease_ttl):
                self.leader = False
                logger.warning(
                    "beat: lost the scheduler lease (held by %s); standing by",
                    store.lease_holder(LEASE_NAME),
                )
                return self._standby_interval()
            now = tx.clock()  # the database decides what is due, not this host
            self._skew = now - time.time()
            for row in tx.due(now):
                retry_at = self._failing.get(row.name)
                if retry_at is not None:
                    if time.monotonic() < retry_at:
                        continue
                    del self._failing[row.name]
                try:
                    with tx.savepoint():
                        self._fire_row(tx, row, now, producer)
                except UNAVAILABLE as exc:
                    stopped = exc  # the broker or the store: keep what was fired, stop
                    break
                except Exception as exc:
                    self._failed(tx, row, exc)
            rows = store.schedule_list()
        if stopped is not None:
            raise stopped
        return self._sleep_for(rows)

    def _failed(self, tx: Any, row: ScheduleRow, exc: Exception) -> None:
        """Record why ``row`` could not be fired; retry it later, alone."""
        bad_spec = isinstance(exc, ConfigurationError)
        backoff = BAD_SPEC_RETRY if bad_spec else min(self.max_interval, FAILED_RETRY)
        self._failing[row.name] = time.monotonic() + backoff
        tx.failed(row.name, f"{type(exc).__name__}: {exc}")
        if bad_spec:
            logger.error(
                "beat: schedule %r has a stored spec that cannot be read: %s (the schedule "
                "is not fired; fix it with the API or the CLI; the spec grammar is %s)",
                row.name,
                exc,
                GRAMMAR,
            )
            return
        logger.error(
            "beat: schedule %r could not be fired (%s: %s); its fire was rolled back, the "
            "other schedules' stand; retrying it in %.1f s",
            row.name,
            type(exc).__name__,
            exc,
            backoff,
            exc_info=exc,
        )

    def _fire_row(self, tx: Any, row: ScheduleRow, now: float, producer: Any) -> None:
        policy = split(loads(row.options))[1]
        stacking = policy.no_stacking and self._sees_jobs(row)
        if row.run_requested is not None and tx.ran_now(row.name, row.run_requested, now):
            self._send(tx, row, row.run_requested, producer, stacking, run_now=True)
        if not row.enabled or row.next_at > now:
            return
        spec = row_spec(row.kind, row.spec, row.interval, row.tz)
        boundary = row.next_at
        if stacking and policy.job is not None and tx.job_live(policy.job):
            new = spec.first_after(now, boundary)
            count = _count(spec, boundary, now) or 1
            if tx.skip_busy(row.name, boundary, new, count):
                logger.info(
                    "beat: schedule %r: previous run (job %d) still queued or running: "
                    "skipped %d due time(s) from %s (no stacking); next at %s",
                    row.name,
                    policy.job,
                    count,
                    utc_iso(boundary),
                    utc_iso(new),
                )
            return
        catch_up = policy.catch_up or self.catch_up
        if spec.next_after(boundary) <= now and catch_up != REPLAY:
            self._collapse(tx, row, spec, now, producer, catch_up, stacking)
            return
        limit = 1 if stacking else CATCH_UP_LIMIT
        fired = 0
        while boundary <= now and fired < limit:
            new = spec.next_after(boundary)
            if not tx.advance(row.name, boundary, new, now):
                return  # another ticker advanced it: never fire twice
            self._send(tx, row, boundary, producer, stacking)
            fired += 1
            boundary = new
        if boundary <= now:
            new = spec.first_after(now, boundary)
            n = _count(spec, boundary, now)
            moved = (
                tx.skip_busy(row.name, boundary, new, n or 1)
                if stacking
                else tx.skip(row.name, boundary, new)
            )
            if moved:
                logger.warning(
                    "beat: schedule %r was %s boundaries behind: fired %d, skipped %s "
                    "(boundaries %s to %s%s); next at %s",
                    row.name,
                    "many" if n is None else fired + n,
                    fired,
                    "the rest" if n is None else n,
                    utc_iso(boundary),
                    utc_iso(now),
                    ", no stacking" if stacking else "",
                    utc_iso(new),
                )
        elif fired > 1:
            logger.info("beat: schedule %r caught up %d missed boundaries", row.name, fired - 1)

    def _collapse(
        self,
        tx: Any,
        row: ScheduleRow,
        spec: Any,
        now: float,
        producer: Any,
        catch_up: str,
        stacking: bool,
    ) -> None:
        """Several boundaries are due (``once`` or ``skip``): one advance from the stored
        boundary to the next future one, with one run (``once``: for the latest due
        boundary) or none (``skip``)."""
        boundary = row.next_at
        new = spec.first_after(now, boundary)
        n = _count(spec, boundary, now)
        if catch_up == ONCE:
            latest = _latest(spec, boundary, now)
            if not tx.advance(row.name, boundary, new, now):
                return  # another ticker advanced it: never fire twice
            self._send(tx, row, latest, producer, stacking)
            fired = 1
        else:
            if not tx.skip(row.name, boundary, new):
                return
            fired = 0
        logger.warning(
            "beat: schedule %r was %s boundaries behind (catch-up %s): fired %d, skipped %s "
            "(boundaries %s to %s); next at %s",
            row.name,
            "many" if n is None else n,
            catch_up,
            fired,
            "the rest" if n is None else n - fired,
            utc_iso(boundary),
            utc_iso(now),
            utc_iso(new),
        )

    def _sees_jobs(self, row: ScheduleRow) -> bool:
        """No stacking needs the jobs in this store (the broker is alkstore on it)."""
        if self.target is not None and self.target.same_database:
            return True
        if row.name not in self._warned:
            self._warned.add(row.name)
            logger.warning(
                "beat: schedule %r has no_stacking, but the broker is not alkstore on the "
                "schedules' store: its runs cannot be seen, so it may stack",
                row.name,
            )
        return False

    def _send(
        self,
        tx: Any,
        row: ScheduleRow,
        boundary: float,
        producer: Any,
        stacking: bool,
        run_now: bool = False,
    ) -> None:
        """Publish one run; with no stacking, record its job id (a primary-key read)."""
        if not stacking:
            if run_now:
                self._publish(row, boundary, producer, run_now=True)
            else:
                self._publish(row, boundary, producer)
            return
        floor = tx.job_floor()
        task_id = uuid.uuid4().hex
        self._publish(row, boundary, producer, run_now=run_now, task_id=task_id)
        job = tx.job_since(floor, task_id)
        if job is not None:
            tx.set_job(row.name, job)

    def _publish(
        self,
        row: ScheduleRow,
        boundary: float,
        producer: Any,
        run_now: bool = False,
        task_id: str | None = None,
    ) -> None:
        options = split(loads(row.options))[0]  # the engine's alkstore_* keys stay here
        if task_id is not None:
            options["task_id"] = task_id
        headers = dict(options.pop("headers", None) or {})
        headers.update(
            celery_beat_task=True, alkstore_schedule=row.name, alkstore_boundary=boundary
        )
        if run_now:
            headers["alkstore_run_now"] = True
        options["headers"] = headers
        if self.target is not None and self.target.same_database:
            # Inside the tick's transaction a retry cannot succeed: fail the tick instead.
            options.setdefault("retry", False)
        logger.info(
            "beat: sending %r (%s) for %s %r",
            row.name,
            row.task,
            "a run-now requested at" if run_now else "boundary",
            boundary,
        )
        args, kwargs = loads(row.args), loads(row.kwargs)
        task = self.app.tasks.get(row.task)
        if task is not None:  # as Celery's beat does: the task's own options apply
            task.apply_async(args, kwargs, producer=producer, **options)
        else:
            self.app.send_task(row.task, args, kwargs, producer=producer, **options)

    def _sleep_for(self, rows: list) -> float:
        now = time.time() + self._skew  # the database's clock, as of the last tick
        clock = time.monotonic()
        self._failing = {n: at for n, at in self._failing.items() if at > clock}
        limit = min(self.max_interval, self.lease_ttl / 3)
        waits = []
        for row in rows:
            retry_at = self._failing.get(row.name)
            if retry_at is not None:
                waits.append(retry_at - clock)
            elif row.run_requested is not None:
                waits.append(0.05)  # requested but locked by another ticker
            elif not row.enabled:
                continue
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


def _count(spec: Any, boundary: float, now: float) -> int | None:
    """How many boundaries from ``boundary`` up to ``now`` (None: too many to count)."""
    if spec.kind != KIND_CRON:
        return int((now - boundary) // spec.interval) + 1
    if now - boundary > 40 * 86400:
        return None
    return len(spec.between(boundary - 1e-6, now, boundary))


def _latest(spec: Any, boundary: float, now: float) -> float:
    """The latest boundary at or before ``now``, from the stored ``boundary`` (a cron
    schedule more than a day behind: looked for in the last day, else ``boundary``)."""
    if spec.kind != KIND_CRON:
        return spec.first_after(now, boundary) - spec.interval
    found = spec.between(max(boundary, now - 86400) - 1e-6, now, boundary)
    return found[-1] if found else boundary
