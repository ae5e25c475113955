"""Beat schedules as the store keeps them (:class:`ScheduleRow`) and one beat tick's
transaction (:class:`ScheduleTick`), whose statements are each engine's named ones."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .statements import Statements


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A beat schedule as stored: ``args``/``kwargs``/``options`` are JSON text.

    ``kind`` is ``'every'`` (``interval`` seconds apart) or ``'cron'`` (``spec`` read in
    the time zone ``tz``); the fields after ``tz`` are the lifecycle the beat keeps."""

    name: str
    spec: str
    interval: float
    task: str
    args: str
    kwargs: str
    options: str
    next_at: float
    origin: str
    kind: str = "every"
    tz: str = "UTC"
    enabled: bool = True
    last_run_at: float | None = None
    run_count: int = 0
    last_error: str | None = None
    #: When a run-now was requested (one extra run, pending until the beat fires it).
    run_requested: float | None = None

    @classmethod
    def from_row(cls, r: Mapping[str, Any]) -> ScheduleRow:
        """A row of the ``schedule_list`` columns, by name (SQLite returns ``enabled``
        as 0/1)."""
        return cls(**{**r, "enabled": bool(r["enabled"])})


#: The columns an upsert writes (the lifecycle columns are the beat's and the CLI's).
UPSERT_FIELDS = ("name", "spec", "interval", "task", "args", "kwargs", "options", "next_at")
UPSERT_FIELDS += ("origin", "kind", "tz")


class ScheduleTick:
    """One beat tick's transaction (see :meth:`Store.schedule_tick`): the database clock,
    the due schedules, and advancing one boundary; all run on the tick's connection,
    inside its lock, and commit together at the end of the tick."""

    def __init__(self, sql: dict[str, str], conn: Any) -> None:
        self.sql, self.conn = sql, conn

    def _run(self, key: str, params: dict[str, Any]) -> Any:
        return self.conn.execute(self.sql[key], params)

    def clock(self) -> float:
        """The database's clock (epoch seconds): "due" is measured against it."""
        clock = self.conn.execute(self.sql["schedule_clock"], {"now": time.time()})
        return float(clock.fetchone()["now"])

    def due(self, now: float) -> list[ScheduleRow]:
        """Enabled schedules with ``next_at <= now`` and any with a pending run-now,
        locked for this transaction (rows another ticker holds are skipped)."""
        rows = self._run("schedule_due", {"now": now}).fetchall()
        return [ScheduleRow.from_row(r) for r in rows]

    def advance(self, name: str, prev: float, new: float, now: float | None = None) -> bool:
        """Boundary ``prev`` fired: ``next_at`` becomes ``new``, the run is counted at
        ``now``. False (nothing changed) when ``next_at`` is no longer ``prev``."""
        params = {"name": name, "prev": prev, "new": new, "now": now}
        return self._run("schedule_advance", params).rowcount == 1

    def skip(self, name: str, prev: float, new: float) -> bool:
        """Move ``next_at`` from ``prev`` to ``new`` without a run (catch-up limit)."""
        return self._run("schedule_skip", {"name": name, "prev": prev, "new": new}).rowcount == 1

    def skip_busy(self, name: str, prev: float, new: float, count: int) -> bool:
        """No stacking: move ``next_at`` from ``prev`` to ``new`` without a run, adding
        ``count`` to the schedule's skipped due times (``alkstore_state.skipped`` in its
        options). False (nothing changed) when ``next_at`` is no longer ``prev``."""
        params = {"name": name, "prev": prev, "new": new, "count": count}
        return self._run("schedule_skip_busy", params).rowcount == 1

    def job_floor(self) -> int:
        """The highest job id now (0 when none): read before a publish, so
        :meth:`job_since` finds the job the publish inserted by a primary-key range."""
        return int(self._run("schedule_job_floor", {}).fetchone()["id"])

    def job_since(self, floor: int, msg_id: str) -> int | None:
        """The id of the job with message id ``msg_id`` inserted above ``floor`` in this
        transaction (the newest when several), or None."""
        row = self._run("schedule_job_since", {"floor": floor, "msg": msg_id}).fetchone()
        return None if row is None else int(row["id"])

    def set_job(self, name: str, job_id: int) -> None:
        """Record ``job_id`` as the schedule's last run (``alkstore_state.job``)."""
        self._run("schedule_set_job", {"name": name, "job": job_id})

    def job_live(self, job_id: int) -> bool:
        """Whether job ``job_id`` is still in the jobs table (pending, delayed or claimed:
        not yet acknowledged, dead-lettered or expired); one primary-key read."""
        return int(self._run("schedule_job_live", {"id": job_id}).fetchone()["n"]) > 0

    def ran_now(self, name: str, requested: float, now: float) -> bool:
        """The run-now requested at ``requested`` fired: cleared and counted."""
        params = {"name": name, "requested": requested, "now": now}
        return self._run("schedule_ran_now", params).rowcount == 1

    def failed(self, name: str, error: str) -> None:
        """Record why the schedule could not be fired (shown by ``list``)."""
        self._run("schedule_failed", {"name": name, "error": error})

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A savepoint: an exception undoes what ran inside it (and propagates); the rest
        of the tick stays, so one schedule's failure does not undo the others' fires."""
        self.conn.execute(self.sql["schedule_savepoint"])
        try:
            yield
        except BaseException:
            self.conn.execute(self.sql["schedule_savepoint_undo"])
            self.conn.execute(self.sql["schedule_savepoint_release"])
            raise
        self.conn.execute(self.sql["schedule_savepoint_release"])


class ScheduleStatements(Statements):
    """The beat's schedule table outside a tick (the API's and CLI's reads and writes),
    a part of :class:`~.interface.Store`; a tick is :meth:`Store.schedule_tick`."""

    def schedule_upsert(self, row: ScheduleRow, keep_grid: bool = True) -> None:
        """Insert or update a schedule. With ``keep_grid`` an existing row whose kind, spec
        and time zone are unchanged keeps its stored ``next_at`` (its grid survives
        restarts). The lifecycle columns (enabled, last run, run count, last error, a
        pending run-now) are never changed by an upsert."""
        params = {f: getattr(row, f) for f in UPSERT_FIELDS}
        params["keep"] = keep_grid
        self._run("schedule_upsert", params)

    def schedule_delete(self, name: str) -> bool:
        return self._run("schedule_delete", {"name": name}) > 0

    def schedule_list(self) -> list[ScheduleRow]:
        return [ScheduleRow.from_row(r) for r in self._all("schedule_list")]

    def schedule_get(self, name: str) -> ScheduleRow | None:
        row = self._one("schedule_get", {"name": name})
        return None if row is None else ScheduleRow.from_row(row)

    def schedule_clock(self) -> float:
        """The database's clock (epoch seconds), the one the beat measures "due" with."""
        return float(self._value("schedule_clock"))

    def schedule_run_now(self, name: str) -> bool:
        """Ask the beat for one extra run of ``name`` (its grid untouched); requests made
        before the beat fires it are one run. False when there is no such schedule."""
        return self._run("schedule_run_now", {"name": name}) > 0

    def schedule_disable(self, name: str) -> bool:
        """Stop firing ``name``; it keeps its stored grid. False when there is none."""
        return self._run("schedule_disable", {"name": name}) > 0

    def schedule_enable(self, name: str, prev: float, new: float) -> bool:
        """Fire ``name`` again from ``new`` (its next boundary on the same grid), guarded
        by the ``next_at`` the caller read (``prev``); False when it changed meanwhile."""
        return self._run("schedule_enable", {"name": name, "prev": prev, "new": new}) > 0
