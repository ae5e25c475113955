"""Schedules in the store: validation, the grid, and the public API.

``schedule()`` / ``unschedule()`` / ``list_schedules()`` work on the store a Celery app's
beat would use (the broker's when the broker is alkstore, else ``beat_alkstore_url``), or
on a :class:`~kombu_alkstore.store.Store` passed as ``store=``. A running beat re-reads the
schedules every tick, so a change is picked up without a restart.
"""

from __future__ import annotations

import difflib
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kombu.utils.json import dumps, loads

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import ScheduleRow, Store, StoreOptions, StoreURL, shared_store
from kombu_alkstore.store.options import parse_store_url, validate_name

from .policy import check_catch_up, check_no_stacking, check_user_options, pack, split
from .spec import KIND_CRON, Spec, parse_spec, row_spec

#: The leadership lease every beat on one store competes for.
LEASE_NAME = "__alkstore_scheduler"
#: Names under this prefix belong to the engine.
RESERVED_PREFIX = "__alkstore"

ORIGIN_CONFIG = "config"
ORIGIN_API = "api"


@dataclass(frozen=True)
class Schedule:
    """A schedule as stored, with its arguments decoded and its lifecycle."""

    name: str
    spec: str
    interval: float
    task: str
    args: list
    kwargs: dict
    options: dict
    next_at: float
    origin: str
    kind: str = "every"
    tz: str = "UTC"
    enabled: bool = True
    last_run_at: float | None = None
    run_count: int = 0
    last_error: str | None = None
    run_requested: float | None = None
    #: ``replay``, ``once`` or ``skip``; None: the beat's default (``beat_alkstore_catch_up``).
    catch_up: str | None = None
    #: Skip a due time while the previous run is still queued or running.
    no_stacking: bool = False
    #: Due times skipped by no stacking (the previous run was still live).
    skipped: int = 0

    @classmethod
    def from_row(cls, row: ScheduleRow) -> Schedule:
        """``options`` are the ``apply_async`` ones: the policies are fields of their own."""
        options, policy = split(loads(row.options))
        return cls(
            name=row.name,
            spec=row.spec,
            interval=row.interval,
            task=row.task,
            args=list(loads(row.args)),
            kwargs=dict(loads(row.kwargs)),
            options=options,
            next_at=row.next_at,
            origin=row.origin,
            kind=row.kind,
            tz=row.tz,
            enabled=row.enabled,
            last_run_at=row.last_run_at,
            run_count=row.run_count,
            last_error=row.last_error,
            run_requested=row.run_requested,
            catch_up=policy.catch_up,
            no_stacking=policy.no_stacking,
            skipped=policy.skipped,
        )

    @property
    def parsed(self) -> Spec:
        return row_spec(self.kind, self.spec, self.interval, self.tz)

    @property
    def display(self) -> str:
        """The spec as written back (cron with its time zone)."""
        return f"{self.spec} {self.tz}" if self.kind == KIND_CRON else self.spec

    def boundaries(self, count: int, after: float | None = None) -> list[float]:
        """The next ``count`` boundaries: from the stored ``next_at`` (the next one the
        beat fires, overdue or not), or those strictly after ``after`` (on the same grid)."""
        spec = self.parsed
        out: list[float] = []
        b = self.next_at if after is None else spec.first_after(after, self.next_at)
        while len(out) < count:
            out.append(b)
            b = spec.next_after(b)
        return out


def first_boundary(interval: float, now: float | None = None) -> float:
    """The first boundary after ``now`` on an ``@every`` grid aligned to the epoch
    (multiples of its interval since 1970-01-01 UTC), so every beat computes the same
    grid: ``@every 1m`` fires on whole minutes, ``@every 1d`` at midnight UTC. Once
    stored, ``next_at`` carries the grid."""
    now = time.time() if now is None else now
    return (math.floor(now / interval) + 1) * interval


def app_timezone(app: Any) -> str:
    """The zone a cron schedule without one is read in: the app's ``timezone``, else UTC
    with ``enable_utc`` (Celery's default), else the host's zone (``TZ`` or
    ``/etc/localtime``)."""
    if app is None:
        return "UTC"
    zone = app.conf.timezone
    if zone:
        return str(getattr(zone, "key", zone))
    if app.conf.enable_utc:
        return "UTC"
    local = os.environ.get("TZ", "").lstrip(":")
    if not local:
        try:
            local = os.path.realpath("/etc/localtime").split("zoneinfo/", 1)[1]
        except IndexError:
            local = ""
    if not local:
        raise ConfigurationError(
            "enable_utc is off and no timezone is set, and the host's time zone has no "
            "IANA name: set the app's timezone setting (e.g. 'Europe/Paris')"
        )
    return local


def check_task(app: Any, task: str, where: str = "") -> None:
    """Refuse a task name the app's registry does not know (suggesting close ones)."""
    known = set(app.tasks.keys())
    if task in known:
        return
    close = difflib.get_close_matches(task, sorted(known), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise ConfigurationError(
        f"{where}task {task!r} is not registered in app {app.main!r}{hint}; schedule it "
        "anyway with check_task=False (CLI: --skip-task-check)"
    )


def _where(name: str, what: str = "schedule") -> str:
    return f"{what} {name!r}: "


def validate_schedule_name(name: Any) -> str:
    validate_name(name, "schedule name")
    if name.startswith(RESERVED_PREFIX):
        raise ConfigurationError(
            f"schedule name {name!r} is reserved (names starting with {RESERVED_PREFIX!r} "
            "belong to the engine)"
        )
    return name


def _json(value: Any, what: str, where: str) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}{what} cannot be stored as JSON: {exc}") from None


def _check_options(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"{where}option names must be strings, got {key!r}")
        out[key] = value
    for key in ("queue", "exchange"):
        entity = out.get(key)
        if entity is not None and not isinstance(entity, str):
            # A kombu Queue/Exchange: keep its name (routing is looked up when fired).
            name = getattr(entity, "name", None)
            if not isinstance(name, str):
                raise ConfigurationError(f"{where}option {key} must be a name, got {entity!r}")
            out[key] = name
    if out.get("queue") is not None:
        validate_name(out["queue"], f"{where}queue name")
    for key in ("routing_key", "exchange"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise ConfigurationError(f"{where}option {key} must be a string, got {out[key]!r}")
    priority = out.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 255
    ):
        raise ConfigurationError(
            f"{where}option priority must be an integer 0-255, got {priority!r}"
        )
    expires = out.get("expires")
    if expires is not None and (
        isinstance(expires, bool) or not isinstance(expires, (int, float)) or expires <= 0
    ):
        raise ConfigurationError(
            f"{where}option expires must be a positive number of seconds (relative to each "
            f"fire), got {expires!r}"
        )
    headers = out.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise ConfigurationError(f"{where}option headers must be a mapping, got {headers!r}")
    return out


def make_row(
    name: Any,
    spec: Any,
    task: Any,
    args: Any = (),
    kwargs: Any = None,
    options: Any = None,
    *,
    origin: str = ORIGIN_API,
    now: float | None = None,
    what: str = "schedule",
    tz: str | None = None,
    default_tz: str = "UTC",
    catch_up: str | None = None,
    no_stacking: bool | None = None,
) -> ScheduleRow:
    """Validate one schedule and build its row; every error names the schedule
    (as ``what`` — e.g. ``"beat_schedule entry"``). A cron spec is read in its own zone,
    else ``tz``, else ``default_tz``; ``next_at`` is its first boundary after ``now``."""
    validate_schedule_name(name)
    where = _where(name, what)
    parsed = parse_spec(spec, name, what, tz=tz, default_tz=default_tz)
    if not isinstance(task, str) or not task.strip():
        raise ConfigurationError(f"{where}task must be a task name, got {task!r}")
    if args is None:
        args = ()
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ConfigurationError(f"{where}args must be a list, got {args!r}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigurationError(f"{where}kwargs must be a mapping with string keys")
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"{where}options must be a mapping, got {options!r}")
    check_user_options(options, where)
    opts = pack(
        _check_options(options, where),
        check_catch_up(catch_up, where),
        check_no_stacking(no_stacking, where),
    )
    return ScheduleRow(
        name=name,
        spec=parsed.text,
        interval=float(parsed.interval),
        task=task,
        args=_json(list(args), "args", where),
        kwargs=_json(dict(kwargs), "kwargs", where),
        options=_json(opts, "options", where),
        next_at=parsed.first_after(time.time() if now is None else now),
        origin=origin,
        kind=parsed.kind,
        tz=parsed.tz,
    )


# ---------------------------------------------------------------------- the store
@dataclass(frozen=True)
class StoreTarget:
    """Where the schedules live, and whether the broker publishes into that database."""

    url: StoreURL
    options: StoreOptions
    #: True when the broker is the alkstore transport on this store: a fire's enqueue
    #: then commits in the same transaction as the boundary advance.
    same_database: bool

    def open(self) -> Store:
        return shared_store(self.url, self.options)


def store_target(app: Any) -> StoreTarget:
    """The store a Celery app's beat uses (see the module docstring)."""
    from kombu_alkstore.transport import Transport as AlkstoreTransport

    conn = app.connection_for_write()
    try:
        if issubclass(conn.get_transport_cls(), AlkstoreTransport):
            transport = conn.transport  # parses the URL and options exactly as the broker does
            return StoreTarget(transport.store_url, transport.store_options, True)
    finally:
        conn.release()
    url = app.conf.get("beat_alkstore_url")
    if not url:
        raise ConfigurationError(
            "the broker is not alkstore, so the alkstore beat scheduler needs the setting "
            "beat_alkstore_url (e.g. 'postgresql://…' or 'sqlite:///beat.db')"
        )
    if isinstance(url, str) and url.startswith("alkstore+"):
        url = url[len("alkstore+") :]
    raw = app.conf.get("beat_alkstore_options") or {}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"setting beat_alkstore_options must be a mapping, got {raw!r}")
    unknown = set(raw) - StoreOptions.names()
    if unknown:
        raise ConfigurationError(
            f"setting beat_alkstore_options has unknown option(s) {sorted(unknown)!r}"
        )
    try:
        options = StoreOptions.from_mapping(dict(raw))
    except ConfigurationError as exc:
        raise ConfigurationError(f"setting beat_alkstore_options: {exc}") from None
    return StoreTarget(parse_store_url(url), options, False)


def _store(app: Any, store: Store | None) -> Store:
    if store is not None:
        return store
    if app is None:
        from celery import current_app

        app = current_app
    return store_target(app).open()


def _app(app: Any) -> Any:
    if app is None:
        from celery import current_app

        return current_app
    return app


def schedule(
    name: str,
    spec: Any,
    task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    tz: str | None = None,
    catch_up: str | None = None,
    no_stacking: bool = False,
    check_task: bool | None = None,
    app: Any = None,
    store: Store | None = None,
) -> Schedule:
    """Create or update the schedule ``name`` (upsert; persists across beat restarts).

    ``spec`` is in the grammar of :mod:`celery_beat_alkstore.spec` (``'@every 5m'``,
    ``'cron 30 7 * * * Europe/Paris'``), a number of seconds, a ``timedelta`` or a Celery
    ``crontab``; ``tz`` the zone of a cron spec that names none (default: the app's).
    ``options`` are ``apply_async`` options (``queue``, ``priority``, ``expires`` in
    seconds, ``routing_key``, ``headers``, …). Re-registering with the same spec and
    zone keeps the schedule's grid; a new one starts a new grid. The lifecycle (enabled,
    runs, last error, skipped count) is kept.

    ``catch_up`` is what the beat does when several boundaries are due at once (after
    downtime): ``"once"`` (one run), ``"replay"`` (each, up to 64) or ``"skip"`` (none);
    None: the beat's ``beat_alkstore_catch_up`` (default ``once``). ``no_stacking=True``
    skips a due time (counted) while the previous run is still queued or running.

    The task name is checked against the app's registry (``app``, or the current app
    when no ``store`` is given): an unknown one is a ConfigurationError unless
    ``check_task=False``. With only ``store=``, no app is at hand and nothing is checked
    unless ``check_task=True`` (then against the current app).
    """
    if check_task is None:
        check_task = app is not None or store is None
    resolved = _app(app) if (app is not None or store is None or check_task) else None
    target = _store(resolved, store)
    row = make_row(
        name,
        spec,
        task,
        args,
        kwargs,
        options,
        origin=ORIGIN_API,
        tz=tz,
        default_tz=app_timezone(resolved),
        now=target.schedule_clock(),
        catch_up=catch_up,
        no_stacking=no_stacking,
    )
    if check_task:
        _check_task(resolved, row.task, _where(name))
    target.schedule_upsert(row, keep_grid=True)
    stored = target.schedule_get(name)
    return Schedule.from_row(stored or row)


def _check_task(app: Any, task: str, where: str) -> None:
    check_task(app, task, where)


def unschedule(name: str, *, app: Any = None, store: Store | None = None) -> bool:
    """Remove the schedule ``name``; False when there was none."""
    validate_schedule_name(name)
    return _store(app, store).schedule_delete(name)


def list_schedules(*, app: Any = None, store: Store | None = None) -> list[Schedule]:
    """Every stored schedule, by name."""
    return [Schedule.from_row(r) for r in _store(app, store).schedule_list()]


def get_schedule(name: str, *, app: Any = None, store: Store | None = None) -> Schedule | None:
    row = _store(app, store).schedule_get(name)
    return None if row is None else Schedule.from_row(row)


def disable(name: str, *, app: Any = None, store: Store | None = None) -> bool:
    """Stop firing ``name`` (persisted). It keeps its grid; False when there is none."""
    return _store(app, store).schedule_disable(name)


def enable(name: str, *, app: Any = None, store: Store | None = None) -> bool:
    """Fire ``name`` again. A schedule that was disabled resumes at its next boundary on
    its own grid after now (the database's clock): boundaries that passed while it was
    disabled are not replayed. False when there is no such schedule."""
    target = _store(app, store)
    for _ in range(10):
        row = target.schedule_get(name)
        if row is None:
            return False
        if row.enabled:
            return True
        now = target.schedule_clock()
        s = Schedule.from_row(row)
        new = row.next_at if row.next_at > now else s.parsed.first_after(now, row.next_at)
        if target.schedule_enable(name, row.next_at, new):
            return True
    raise ConfigurationError(f"schedule {name!r} kept changing; enable it again")


def run_now(name: str, *, app: Any = None, store: Store | None = None) -> bool:
    """Ask the running beat for one extra run of ``name`` now (its grid untouched; a
    disabled schedule runs too). Requests made before the beat fires it are one run.
    False when there is no such schedule."""
    return _store(app, store).schedule_run_now(name)


def upcoming(
    schedules: Sequence[Schedule], count: int = 10, after: float | None = None
) -> list[tuple[float, Schedule]]:
    """The next ``count`` boundaries over all enabled ``schedules``, earliest first (from
    each stored ``next_at``, or strictly after ``after``)."""
    found: list[tuple[float, Schedule]] = []
    for s in schedules:
        if s.enabled:
            found.extend((at, s) for at in s.boundaries(count, after))
    found.sort(key=lambda pair: (pair[0], pair[1].name))
    return found[:count]
