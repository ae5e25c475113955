"""The store interface (:class:`Store`): queue tables and every queue operation on them.

Both engines implement the primitives marked abstract; the job lifecycle (which
transition a requeue, retry or failure takes, the backoff curve) lives here once.

Every operation on a claimed job (:meth:`Store.ack`, :meth:`Store.heartbeat`,
:meth:`Store.release`, :meth:`Store.requeue`, :meth:`Store.retry`, :meth:`Store.fail`)
is valid only with the claim's token while its deadline holds; otherwise it changes
nothing, and the job's id is missing from the returned set.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigurationError, StoreUnavailable
from .acts import ACT_IDS_CAP, Actor, changed_groups
from .admin import RatePoint, RateTally
from .ambient import unbound
from .backoff import retry_wait
from .checks import check_lease_ttl, check_queue_args, is_number
from .claims import ClaimSession
from .fair import FairStatements
from .generations import GenerationRotation
from .health import HealthReads
from .limits import LimitStatements, limit_key_of
from .options import StoreOptions, StoreURL, validate_name
from .planner import PlannerStats
from .rates import RateStatements
from .reads import DashboardReads
from .schedules import ScheduleStatements
from .schema import build_tables, ddl_statements
from .statements import Statements
from .values import (
    MAINTENANCE_JOBS,
    Capabilities,
    Delivery,
    Job,
    MaintenanceResult,
    NewJob,
    QueueCounts,
    SweepResult,
)
from .waiter import Waiter

logger = logging.getLogger("kombu_alkstore")


def _handles(deliveries: Iterable[Delivery]) -> list[Delivery]:
    return list(deliveries)


class Store(
    DashboardReads,
    HealthReads,
    PlannerStats,
    GenerationRotation,
    LimitStatements,
    RateStatements,
    FairStatements,
    ScheduleStatements,
    Statements,
):
    """Queue tables on one database. Thread-safe; one instance per process is enough.

    An engine is a package under ``store/`` (``postgres/``, ``sqlite/``) implementing the
    abstract methods, with its SQL in ``.sql`` files defining at least
    :data:`~.statements.STATEMENTS`. Callers learn what it can do from
    :attr:`capabilities` and which exceptions mean a lost database from
    :attr:`connection_errors`; none of them tests the engine's name or imports its
    driver. Its parts: :class:`~.reads.DashboardReads` (pause, the dashboard's reads),
    :class:`~.limits.LimitStatements` (concurrency limits),
    :class:`~.rates.RateStatements` (rate limits),
    :class:`~.fair.FairStatements` (fair share between keys),
    :class:`~.schedules.ScheduleStatements` (the beat's table), on
    :class:`~.statements.Statements` (the statement primitives).
    """

    #: The engine's name, for display (``postgresql``, ``sqlite``); never to branch on.
    engine: str
    capabilities: Capabilities
    #: The driver's exceptions that mean the database was lost or unreachable (the
    #: transport's ``connection_errors``; kombu reconnects on them).
    connection_errors: tuple[type[BaseException], ...] = (StoreUnavailable,)
    #: The driver's exceptions for any failed statement (connection errors included).
    database_errors: tuple[type[BaseException], ...] = (StoreUnavailable,)

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        self.url = url
        self.options = options
        self.tables = build_tables(options.schema, self.engine)
        #: Each table's name as written in SQL: the ``{jobs}``… slots of the ``.sql`` files.
        self.names = self.tables.names()
        #: Publishes and acks per queue, for the dashboard's rates (see ``RateTally``).
        self.rates_tally = RateTally(self._write_rates, self.trim_rates)
        #: The database's clock minus this host's, in seconds (see :meth:`now`).
        self.clock_offset = 0.0
        #: Set by :meth:`close`: nothing more is run on this store.
        self.closed = False

    def now(self) -> float:
        """The database's clock as this host estimates it (epoch seconds): what a job's
        ``run_at`` and ``deadline``, stamped by the database, are compared with here, so
        a worker whose host clock is skewed neither spins before nor sleeps past them."""
        return time.time() + self.clock_offset

    def measure_clock(self) -> float:
        """Measure :attr:`clock_offset` again (engines whose times come from this host's
        clock keep 0); returns it."""
        return self.clock_offset

    def detached(self) -> contextlib.AbstractContextManager:
        """A context whose store calls run on the store's own connections, outside a
        caller's transaction, where the engine allows it (see :class:`Capabilities`)."""
        if self.capabilities.declare_outside_transaction:
            return unbound()
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ setup
    def ddl(self, existing: dict[str, set[str]] | None = None) -> list[str]:
        """The idempotent DDL for this store (for migrations run by a privileged role);
        ``existing`` (table -> columns) as :func:`~.schema.ddl_statements` takes it."""
        return ddl_statements(self.options.schema, self.engine, existing)

    @abc.abstractmethod
    def setup(self) -> None:
        """Create the tables if missing; idempotent and safe from many processes at once."""

    @abc.abstractmethod
    def schema_version(self) -> int | None:
        """The stored schema version, or None when the tables are missing."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- enqueue
    def enqueue(self, queue: str, body: bytes | str, **kwargs: Any) -> int | None:
        """Enqueue one job (see :class:`NewJob` for the keyword arguments); return its id
        (None: its ``unique_key`` is held by a live job, see :meth:`enqueue_many`)."""
        return self.enqueue_many([NewJob(queue, body, **kwargs)])[0]

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int | None]:
        """Enqueue jobs atomically (all or none); return their ids in order.

        Missing ``visibility_timeout``/``max_attempts``/``backoff_base`` are stamped from
        the queue's options, then the store's; a queue ``message_ttl`` sets ``expires_at``.
        Workers waiting on these queues are woken when the jobs commit.

        A job with a ``unique_key`` that a live job of its queue holds is not enqueued:
        its id is None, and one INFO line on the ``kombu_alkstore`` logger names the job
        holding the key (:meth:`unique_holder`). A key held by a publish not yet committed
        makes this call wait for that transaction (PostgreSQL) or for the write lock
        (SQLite): it is enqueued if that one rolls back, not if it commits.
        """
        checked = [job.checked() for job in jobs]
        if not checked:
            return []
        ids = self._insert(checked)
        self.rates_tally.published(
            [j.queue for j, i in zip(checked, ids, strict=True) if i is not None]
        )
        for job, job_id in zip(checked, ids, strict=True):
            if job_id is None:
                self._log_duplicate(job)
        return ids

    def publish(self, jobs: Sequence[NewJob]) -> None:
        """Enqueue for a producer: :meth:`enqueue_many`, except that an engine may
        return before the commit is confirmed when ``confirm_publish`` is off."""
        self.enqueue_many(jobs)

    def flush_publishes(self) -> None:  # noqa: B027 - engines that confirm as they publish
        """Wait until every publish of this process is confirmed (see :meth:`publish`)."""

    @abc.abstractmethod
    def _insert(self, jobs: list[NewJob]) -> list[int | None]:
        """Insert the checked jobs in one transaction; a job whose unique key is held
        (statement ``insert_unique`` inserted nothing) has None for its id."""

    def unique_holder(self, queue: str, key: str) -> Job | None:
        """The live job of ``queue`` holding the unique key ``key`` (its ``msg_id`` is
        the Celery task id that will run), or None when the key is free."""
        row = self._one("unique_holder", {"queue": queue, "unique_key": key})
        return Job(**row) if row else None

    def _log_duplicate(self, job: NewJob) -> None:
        """The INFO line of a publish not enqueued because its unique key is held."""
        holder = self.unique_holder(job.queue, job.unique_key or "")
        if holder is None:  # gone since (acked between the insert and this read)
            held = "a job no longer live"
        else:
            held = f"job {holder.id} (task id {holder.msg_id}, {holder.state})"
        logger.info(
            "alkstore: task id %s not enqueued on queue %r: unique key %r is held by %s",
            job.msg_id,
            job.queue,
            job.unique_key,
            held,
        )

    def _job_params(self, j: NewJob) -> dict[str, Any]:
        """The bound parameters of one job's INSERT that every engine uses."""
        o = self.options
        return {
            "queue": j.queue,
            "msg_id": j.msg_id,
            "body": bytes(j.body),
            "priority": j.priority,
            "expires_at": j.expires_at,
            "vt": j.visibility_timeout,
            "ma": j.max_attempts,
            "bb": j.backoff_base,
            "d_vt": o.visibility_timeout,
            "d_ma": o.max_attempts,
            "d_bb": o.backoff_base,
            "unique_key": j.unique_key,
            "unique_claimed": j.unique_claimed if j.unique_key is not None else None,
            # the alkstore_limit_key header of the stored envelope (store/limits.py)
            "limit_key": limit_key_of(j.body),
        }

    # ------------------------------------------------------------------ claim
    @abc.abstractmethod
    def claim(self, queues: Sequence[str], limit: int = 1) -> list[Delivery]:
        """Claim up to ``limit`` due jobs from ``queues`` in ``priority DESC, run_at, id`` order.

        One statement; each job claimed once however many consumers race (row locks skipped
        on PostgreSQL, one writer at a time on SQLite). Each claim gets a fresh token, adds
        one attempt and a deadline of ``now + visibility_timeout``. A lapsed claim whose
        attempts are spent goes to the dead letters instead; expired jobs are never claimed.
        """

    @abc.abstractmethod
    def has_due(self, queues: Sequence[str]) -> bool:
        """Whether any job in ``queues`` is due (a lapsed claim included): one cheap read."""

    @abc.abstractmethod
    def ping(self) -> None:
        """One round trip: raises when the database cannot be reached."""

    def size(self, queue: str) -> int:
        """Pending jobs (due or delayed) in ``queue``: the AMQP message count."""
        return int(self._value("size", {"queue": queue}) or 0)

    @abc.abstractmethod
    def next_due(self, queues: Sequence[str]) -> float | None:
        """The earliest ``run_at`` of a pending job in ``queues`` (for delayed wake-ups)."""

    # ------------------------------------------------- operations on a claim
    def ack(self, deliveries: Iterable[Delivery]) -> set[int]:
        """Delete finished jobs; return the ids whose ack landed."""
        held = _handles(deliveries)
        landed = self._delete_held(held)
        self.rates_tally.acked(held, landed)
        return landed

    def heartbeat(self, deliveries: Iterable[Delivery], extend: float | None = None) -> set[int]:
        """Reset deadlines to ``now + extend`` (default: each job's visibility timeout).

        Returns the ids still held; a lapsed claim is not taken back.
        """
        if extend is not None and (not is_number(extend) or extend <= 0):
            raise ConfigurationError(f"heartbeat extend must be a positive number, got {extend!r}")
        return self._extend_held(_handles(deliveries), extend)

    def release(self, deliveries: Iterable[Delivery]) -> set[int]:
        """Hand jobs back unprocessed (clean shutdown): due at once, the attempt refunded."""
        return self._pend_held([(d, 0.0, 1) for d in deliveries])

    def requeue(self, deliveries: Iterable[Delivery]) -> set[int]:
        """Return jobs to pending, keeping the attempt: at once after a first delivery,
        after the backoff curve on later ones; a spent budget dead-letters instead."""
        return self.retry(deliveries, delay=None, first_immediate=True)

    def retry(
        self,
        deliveries: Iterable[Delivery],
        delay: float | None = None,
        error: str = "attempts exhausted",
        *,
        first_immediate: bool = False,
    ) -> set[int]:
        """Return jobs to pending after ``delay`` (default: the backoff curve).

        A job whose attempts are spent goes to the dead letters with ``error``.
        """
        if delay is not None and (not is_number(delay) or delay < 0):
            raise ConfigurationError(f"retry delay must be a number >= 0, got {delay!r}")
        pend, spent = [], []
        for d in deliveries:
            if d.attempts >= d.max_attempts:
                spent.append(d)
                continue
            pend.append((d, retry_wait(d.attempts, d.backoff_base, delay, first_immediate), 0))
        landed = self._pend_held(pend) if pend else set()
        if spent:
            landed |= self._kill_held(spent, error)
        return landed

    def fail(self, deliveries: Iterable[Delivery], error: str) -> set[int]:
        """Move jobs to the dead letters with ``error``."""
        return self._kill_held(_handles(deliveries), str(error))

    def revoke(self, task_ids: Sequence[str]) -> int:
        """Record that the tasks ``task_ids`` with jobs still in the store (pending,
        delayed or held) are revoked, so every later claim of them delivers them marked
        revoked; the record goes once no job of the task is left (maintenance). Writes no
        job row, so it locks none (a revoke in a caller's long transaction holds back no
        worker). Returns how many tasks were newly recorded. A task with no job in the
        store is not recorded (the workers' own revoked lists cover it, as on other
        brokers)."""
        ids = [validate_name(str(t), "task id") for t in task_ids]
        return self._run("revoke", {"ids": self._array(ids)}) if ids else 0

    def revoked_among(self, job_ids: Sequence[int]) -> set[int]:
        """Which of these jobs were revoked (see :meth:`revoke`): one indexed read."""
        if not job_ids:
            return set()
        ids = self._array([int(i) for i in job_ids])
        return set(self._column("revoked_among", {"job_ids": ids}))

    def scheduled(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Delayed jobs (pending, due in the future), soonest first: the ETA and countdown
        tasks that ``celery inspect scheduled`` cannot list on this broker."""
        return [Job(**r) for r in self._all("scheduled", {"queue": queue, "limit": int(limit)})]

    def dead_explain(self, msg_id: str, error: str, was: str = "rejected") -> int:
        """Replace the generic ``was`` error of the dead letters of message ``msg_id`` by
        ``error`` (the reason a consumer learnt after it rejected the message)."""
        return self._run("dead_explain", {"msg_id": msg_id, "error": error, "was": was})

    @abc.abstractmethod
    def _delete_held(self, held: list[Delivery]) -> set[int]: ...

    @abc.abstractmethod
    def _extend_held(self, held: list[Delivery], extend: float | None) -> set[int]: ...

    @abc.abstractmethod
    def _pend_held(self, held: list[tuple[Delivery, float, int]]) -> set[int]:
        """Held jobs to pending: ``run_at = now + delay``, ``attempts -= refund``."""

    @abc.abstractmethod
    def _kill_held(self, held: list[Delivery], error: str) -> set[int]: ...

    # ------------------------------------------------------------ maintenance
    @abc.abstractmethod
    def maintain(self, job: str) -> MaintenanceResult:
        """Run one maintenance job (one of :data:`MAINTENANCE_JOBS`); idempotent.

        * ``expire``: expired jobs not running (pending, or a lapsed claim) leave the
          queue: dead-lettered with 'expired', or dropped on a transient queue (declared
          with ``x-expires`` or ``x-message-ttl``): ``count`` dead-lettered, ``dropped``
          dropped.
        * ``lapsed``: lapsed claims whose attempts are spent go to the dead letters with
          'attempts exhausted' (what a claim would do, for queues no one consumes).
        * ``retention``: dead letters past their queue's (or the store's) retention are
          deleted.
        * ``dead_offers``: hand-off offers of consumers that are gone are deleted.
        * ``expired_queues``: queues unused past their ``x-expires`` are dropped with
          their bindings and jobs; ``queues`` names them.
        """

    def maintain_round(self) -> list[MaintenanceResult]:
        """Every maintenance job once, results in :data:`MAINTENANCE_JOBS` order: a
        worker's round. An engine may run them as one statement (PostgreSQL does, so an
        idle worker's round costs the database one statement, not one per job)."""
        return [self.maintain(job) for job in MAINTENANCE_JOBS]

    def maintain_until_done(self, budget: float = math.inf) -> list[MaintenanceResult]:
        """A round (:meth:`maintain_round`), then each job that hit its batch bound
        (``more``) again, a statement per run, until it deletes fewer or ``budget``
        seconds passed; each job's result sums its runs (``more`` if it stopped short)."""
        stop = time.monotonic() + budget
        done = []
        for total in self.maintain_round():
            while total.more and time.monotonic() < stop:
                again = self.maintain(total.job)
                total = dataclasses.replace(
                    total,
                    count=total.count + again.count,
                    dropped=total.dropped + again.dropped,
                    queues=total.queues + again.queues,
                    more=again.more,
                )
            done.append(total)
        return done

    def sweep(self) -> SweepResult:
        """Every maintenance job until done (the CLI's ``sweep``; workers run them under
        a lease, see :mod:`kombu_alkstore.maintenance`)."""
        done = {r.job: r for r in self.maintain_until_done()}
        return SweepResult(
            expired=done["expire"].count,
            dead_purged=done["retention"].count,
            queues_dropped=done["expired_queues"].queues,
            expired_dropped=done["expire"].dropped,
        )

    # ------------------------------------------------------------ reads, admin
    def get_job(self, job_id: int | str) -> Job | None:
        """A live or dead job by its own id (int) or its message id (str, the Celery task id)."""
        key = "get_job_by_id" if isinstance(job_id, int) else "get_job_by_msg"
        row = self._one(key, {"id": job_id})
        return Job(**row) if row else None

    @abc.abstractmethod
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        """Per-queue counts for the given queues (default: every queue with jobs or dead)."""

    def purge(self, queue: str, actor: Actor | None = None) -> int:
        """Delete the queue's pending jobs; return how many. With ``actor``, the purge is
        recorded as an act in its transaction (none when nothing was purged; see
        :mod:`.acts`)."""
        params = self._cap({"queue": queue})
        if actor is None:  # one statement (a Celery purge): retried on a broken connection
            return sum(g.count or 0 for g in changed_groups(self._all("purge", params)))
        change = self._acting("queue_purge", actor, lambda run: run("purge", params))
        return sum(g.count or 0 for g in change)

    @staticmethod
    def _cap(params: dict[str, Any]) -> dict[str, Any]:
        """A change's parameters with ``cap``, the job ids its act keeps at most."""
        return {**params, "cap": ACT_IDS_CAP}

    @abc.abstractmethod
    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Dead letters, newest first."""

    # An operator's change below, given an ``actor``, is recorded as an act in the
    # change's transaction, one per queue changed (none when nothing changed; .acts).
    @abc.abstractmethod
    def dead_requeue(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        """Move dead letters back to pending (attempts reset); ``ids=None`` means all
        (of ``queue`` when given). Returns how many moved."""

    @abc.abstractmethod
    def dead_purge(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        """Delete dead letters; ``ids=None`` means all (of ``queue`` when given)."""

    @abc.abstractmethod
    def dead_move(self, ids: Sequence[int], queue: str, actor: Actor | None = None) -> int:
        """Requeue the dead letters ``ids`` to another ``queue`` (attempts reset)."""

    @abc.abstractmethod
    def _write_rates(self, rows: list[RatePoint]) -> None:
        """Add counted publishes/acks to their minute rows and to the totals rows."""

    # ---------------------------------------------------------------- routing
    @abc.abstractmethod
    def exchange_declare(self, name: str, type_: str) -> None: ...

    def exchange_type(self, name: str) -> str | None:
        return self._value("exchange_type", {"name": name})

    @abc.abstractmethod
    def exchange_delete(self, name: str) -> None: ...

    @abc.abstractmethod
    def bind(self, exchange: str, routing_key: str, queue: str) -> None: ...

    @abc.abstractmethod
    def unbind(self, exchange: str, routing_key: str, queue: str) -> None: ...

    def bindings(self, exchange: str) -> list[tuple[str, str]]:
        """``(routing_key, queue)`` pairs bound to ``exchange``."""
        return [
            (r["routing_key"], r["queue"]) for r in self._all("bindings", {"exchange": exchange})
        ]

    def routing_version(self) -> int:
        """A number that changes whenever exchanges or bindings change (for caches)."""
        return int(self._value("routing_version") or 0)

    def queue_declare(
        self, name: str, message_ttl: float | None = None, expires: float | None = None
    ) -> None:
        """Create or refresh a queue's row (options, last use)."""
        check_queue_args(name, message_ttl, expires)
        self._run("queue_declare", {"name": name, "ttl": message_ttl, "expires": expires})

    def queue_exists(self, name: str) -> bool:
        return self._one("queue_exists", {"name": name}) is not None

    @abc.abstractmethod
    def queue_delete(self, name: str) -> int:
        """Drop the queue: its row, bindings and live jobs. Returns jobs deleted."""

    @abc.abstractmethod
    def touch_queues(self, names: Sequence[str]) -> set[str]:
        """Mark queues as used now (keeps ``x-expires`` queues of live consumers); returns
        the names that exist (a queue missing from it was dropped or never declared)."""

    # ----------------------------------------------------------------- leases
    def lease_acquire(self, name: str, owner: str, ttl: float) -> bool:
        """Take or renew the named lease for ``ttl`` seconds; False while another holds it."""
        check_lease_ttl(ttl)
        return self._one("lease_acquire", {"name": name, "owner": owner, "ttl": ttl}) is not None

    def lease_release(self, name: str, owner: str) -> bool:
        return self._run("lease_release", {"name": name, "owner": owner}) > 0

    def lease_holder(self, name: str) -> str | None:
        """The live holder of a lease, or None."""
        return self._value("lease_holder", {"name": name})

    # ----------------------------------------------------------------- wakeup
    def results(self) -> Any:
        """The result backend's tables on this store (a :class:`.resultstore.ResultStore`,
        made once per store; see :mod:`kombu_alkstore.results`)."""
        made = self.__dict__.get("_result_store")
        return (
            made
            if made is not None
            else self.__dict__.setdefault("_result_store", self._new_results())
        )

    def _new_results(self) -> Any:
        raise NotImplementedError(f"the {self.engine} engine keeps no results")

    @abc.abstractmethod
    def waiter(self) -> Waiter:
        """A new wake-up source announcing enqueued work on any queue."""

    def session(self) -> ClaimSession | None:
        """A new connection for claims and acks that do not block an event loop, when
        :attr:`capabilities` has ``session``; None otherwise (claims block)."""
        return None

    # -------------------------------------------------------------- schedules
    @abc.abstractmethod
    @contextmanager
    def schedule_tick(self) -> Iterator[Any]:
        """One transaction for one tick: yields an object with ``due(now)`` (locks due rows,
        skipping rows another ticker holds) and ``advance(name, prev, new) -> bool``
        (guarded by the previous ``next_at``). Enqueues made inside commit with it."""

    # ------------------------------------------------- transactional publish
    @abc.abstractmethod
    def _adopt(self, connection: Any) -> Any:
        """Check a caller's connection reaches this store; return the driver connection."""
