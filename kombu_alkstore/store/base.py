"""The store interface: queue tables and every queue operation on them.

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
import contextvars
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, StoreUnavailable
from .admin import ANY_DEAD, TOTAL_MINUTE, ClaimStat, DeadFilter, RatePoint, RateTally
from .backoff import backoff_delay
from .options import StoreOptions, StoreURL, validate_name
from .schema import build_tables, ddl_statements

EXCHANGE_TYPES = ("direct", "topic", "fanout")

#: A row as the engines return it: a mapping by column name.
Row = Mapping[str, Any]

#: The statements the base class runs by name: every engine's ``.sql`` defines them
#: (checked when a store opens, see :func:`.sqlfile.load_queries`).
STATEMENTS = frozenset(
    [
        "size",
        "revoke",
        "revoked_among",
        "scheduled",
        "dead_explain",
        "get_job_by_id",
        "get_job_by_msg",
        "purge",
        "queue_pause",
        "queue_resume",
        "paused_list",
        "peek",
        "dead_search",
        "dead_search_window",
        "dead_window",
        "dead_count",
        "dead_ids",
        "claim_stats",
        "rates_since",
        "rates_totals",
        "rates_trim",
        "exchange_type",
        "bindings",
        "routing_version",
        "queue_declare",
        "queue_exists",
        "lease_acquire",
        "lease_release",
        "lease_holder",
        "schedule_upsert",
        "schedule_delete",
        "schedule_list",
        "schedule_get",
        "schedule_clock",
        "schedule_run_now",
        "schedule_disable",
        "schedule_enable",
        "schedule_due",
        "schedule_advance",
        "schedule_skip",
        "schedule_ran_now",
        "schedule_failed",
    ]
)

#: The maintenance jobs, in the order one round runs them (see :meth:`Store.maintain`
#: and :mod:`kombu_alkstore.maintenance`).
MAINTENANCE_JOBS = ("expire", "lapsed", "retention", "dead_offers", "expired_queues")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine can do beyond the common interface.

    Callers branch on these, never on the engine's name; the conformance suite runs every
    capability's tests and skips only those an engine declares it lacks.
    """

    #: Its waiter has a socket to select on (:meth:`Waiter.fileno`) and its wake-ups
    #: carry due times; without it a consumer polls for changes.
    listener: bool = False
    #: Publishers hand due jobs to idle consumers' offers (:meth:`ClaimSession.register`,
    #: :attr:`Wakeup.handoffs`); needs :attr:`session`.
    handoff: bool = False
    #: :meth:`Store.session` gives a :class:`ClaimSession`: claims and acks that do not
    #: block an event loop.
    session: bool = False
    #: :meth:`Store.publish` may return before the commit is confirmed
    #: (``confirm_publish`` off: pipelined).
    pipelined_publish: bool = False
    #: The store's own connections work beside a caller's open transaction
    #: (``bound_connection``): declarations commit on their own and routing reads see
    #: committed state (:meth:`Store.detached`). SQLite cannot: the caller holds the only
    #: write lock, so there they join the caller's transaction.
    declare_outside_transaction: bool = False


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    """What one maintenance job did: the rows it moved or deleted (``count``), the
    expired jobs of transient queues it dropped (``dropped``, job ``expire``) and the
    queues it dropped (``queues``, job ``expired_queues``)."""

    job: str
    count: int = 0
    dropped: int = 0
    queues: tuple[str, ...] = ()


#: The caller's open connection for transactional publish (see ``bound_connection``).
AMBIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("alkstore_ambient", default=None)


@contextmanager
def unbound() -> Iterator[None]:
    """Run store calls on the store's own connections even inside ``bound_connection``:
    for work that must not commit or roll back with the caller (setup, routing reads,
    declarations on PostgreSQL)."""
    token = AMBIENT.set(None)
    try:
        yield
    finally:
        AMBIENT.reset(token)


@contextmanager
def bound_connection(connection: Any) -> Iterator[None]:
    """Route every store write of this context (thread or asyncio task) through the
    caller's open ``connection``: nothing is committed by the store, so the jobs commit or
    roll back with the caller's transaction. Each store checks at first use that the
    connection reaches its database and schema."""
    token = AMBIENT.set(connection)
    try:
        yield
    finally:
        AMBIENT.reset(token)


@dataclass(frozen=True, slots=True)
class NewJob:
    """A message to enqueue. ``run_at``/``expires_at`` are absolute epoch seconds."""

    queue: str
    body: bytes
    priority: int = 0
    run_at: float | None = None
    delay: float | None = None
    expires_at: float | None = None
    msg_id: str | None = None
    visibility_timeout: float | None = None
    max_attempts: int | None = None
    backoff_base: float | None = None

    def checked(self) -> NewJob:
        """Validate every field; raise :class:`ConfigurationError` naming the bad one."""
        validate_name(self.queue, "queue name")
        if isinstance(self.body, str):
            object.__setattr__(self, "body", self.body.encode("utf-8"))
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise ConfigurationError(f"job body must be bytes or str, got {type(self.body)!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigurationError(f"priority must be an integer 0-255, got {self.priority!r}")
        if not 0 <= self.priority <= 255:
            raise ConfigurationError(f"priority must be 0-255, got {self.priority!r}")
        if self.delay is not None and (not _is_number(self.delay) or self.delay < 0):
            raise ConfigurationError(f"delay must be a number >= 0, got {self.delay!r}")
        for name in ("run_at", "expires_at"):
            value = getattr(self, name)
            if value is not None and not _is_number(value):
                raise ConfigurationError(f"{name} must be epoch seconds, got {value!r}")
        for name in ("visibility_timeout", "backoff_base"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value) or value <= 0):
                raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigurationError(
                f"max_attempts must be an integer >= 1, got {self.max_attempts!r}"
            )
        if self.msg_id is not None:
            validate_name(self.msg_id, "message id")
        return self


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed job: the claim's handle (``id``, ``token``) plus what a consumer needs."""

    id: int
    token: int
    queue: str
    body: bytes
    priority: int
    attempts: int
    max_attempts: int
    backoff_base: float
    deadline: float
    msg_id: str | None = None
    #: The job's own visibility timeout (stamped at publish): a holder heartbeats well
    #: within it, whatever its own configuration says.
    visibility_timeout: float | None = None
    #: A revoke of its task reached the broker before this claim (see :meth:`Store.revoke`).
    revoked: bool = False


@dataclass(frozen=True, slots=True)
class Job:
    """A job as :meth:`Store.get_job` and the dead-letter reads see it."""

    id: int
    queue: str
    msg_id: str | None
    body: bytes
    priority: int
    state: str  # 'pending' | 'processing' | 'dead'
    attempts: int
    max_attempts: int
    created_at: float
    run_at: float | None = None
    expires_at: float | None = None
    deadline: float | None = None
    died_at: float | None = None
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Per-queue counts; ``oldest_age`` is the age in seconds of the oldest due pending job."""

    queue: str
    pending: int = 0
    delayed: int = 0
    processing: int = 0
    dead: int = 0
    oldest_age: float | None = None


@dataclass(frozen=True, slots=True)
class SweepResult:
    #: Expired jobs moved to the dead letters (task queues).
    expired: int = 0
    dead_purged: int = 0
    queues_dropped: tuple[str, ...] = ()
    #: Expired jobs of transient queues (declared with ``x-expires`` or
    #: ``x-message-ttl``: event and reply queues) dropped, as RabbitMQ drops them.
    expired_dropped: int = 0


@dataclass
class Wakeup:
    """What a waiter saw: queues with due work, or ``any`` when the engine cannot tell."""

    queues: set[str] = field(default_factory=set)
    any: bool = False
    #: The earliest future ``run_at`` announced (delayed work), if any.
    next_at: float | None = None
    #: Exchanges or bindings changed (engines that announce it: PostgreSQL).
    routing: bool = False
    #: Jobs a publisher handed to this waiter, already claimed: ``(channel number,
    #: delivery)`` (PostgreSQL; see ``Channel.take_handoff``).
    handoffs: list[tuple[int, Delivery]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.any or bool(self.queues) or bool(self.handoffs)

    def merge(self, other: Wakeup) -> None:
        """Add what ``other`` saw."""
        self.queues |= other.queues
        self.any |= other.any
        self.routing |= other.routing
        self.handoffs += other.handoffs
        if other.next_at and (self.next_at is None or other.next_at < self.next_at):
            self.next_at = other.next_at


class Waiter(abc.ABC):
    """A wake-up source for new work; one per consumer, not shared between threads."""

    @abc.abstractmethod
    def fileno(self) -> int | None:
        """A socket to select on (PostgreSQL), or None when the engine polls (SQLite)."""

    @abc.abstractmethod
    def poll(self) -> Wakeup:
        """Collect pending wake-ups without blocking."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> Wakeup:
        """Block until work is announced or ``timeout`` seconds pass."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    def address(self) -> int | None:
        """Where publishers hand jobs to this waiter's offers (engines with hand-off:
        see :meth:`ClaimSession.register`); None otherwise."""
        return None

    def retire(self) -> list[tuple[int, Delivery]]:
        """Withdraw this waiter's hand-off offers; return hand-offs that arrived meanwhile."""
        return []

    def hear_wakeups(self, on: bool) -> bool:
        """Stop (``on`` False) or resume hearing the store's announcements of new jobs and
        routing changes; hand-offs to this waiter keep arriving either way. Resumed, every
        job committed from then on is announced. Returns False when the engine cannot
        stop them (they are always heard)."""
        return False


#: Called with a statement's outcome, or with the exception it raised.
Answer = Callable[[Any], None]


class ClaimSession(abc.ABC):
    """Claims, acks and a worker's slow timers on one connection, sent without waiting
    and answered by callback from :meth:`on_readable` (engines with the ``session``
    capability).

    Each request is its own transaction, run in send order; every callback is called
    exactly once, with the outcome or with the exception (one of the store's
    ``connection_errors`` when the connection was lost: the effect is then unknown,
    which at-least-once delivery allows). Not thread-safe: one thread (an event loop's)
    sends and reads.
    """

    @abc.abstractmethod
    def fileno(self) -> int:
        """The socket to register with the event loop as a reader."""

    @abc.abstractmethod
    def on_readable(self) -> None:
        """Read what arrived; run the callbacks of the answered requests."""

    @abc.abstractmethod
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""

    @abc.abstractmethod
    def wait(self) -> None:
        """Block until every request in flight is answered (at close)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection; the callbacks still waiting get the error."""

    @abc.abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        callback: Callable[[list[Delivery] | BaseException, bool], None],
    ) -> None:
        """:meth:`Store.claim` in one statement: ``callback(deliveries, more)`` where
        ``more`` says spent jobs took places (more may be due)."""

    @abc.abstractmethod
    def ack(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.ack`: ``callback`` gets the set of ids whose ack landed."""

    @abc.abstractmethod
    def write_rates(
        self, rows: Sequence[RatePoint], trim_before: float | None, callback: Answer
    ) -> None:
        """Add counted rows (:meth:`Store._write_rates`) and, with ``trim_before``, trim
        (:meth:`Store.trim_rates`); ``callback`` gets None per statement sent."""

    @abc.abstractmethod
    def release(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.release`: ``callback`` gets the set of ids handed back."""

    @abc.abstractmethod
    def has_due(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.has_due`: ``callback`` gets a bool."""

    @abc.abstractmethod
    def heartbeat(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        """:meth:`Store.heartbeat` (each job by its own visibility timeout): ``callback``
        gets the set of ids still held."""

    @abc.abstractmethod
    def next_due(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.next_due`: ``callback`` gets the epoch seconds, or None."""

    @abc.abstractmethod
    def touch_queues(self, queues: Sequence[str], callback: Answer) -> None:
        """:meth:`Store.touch_queues`: ``callback`` gets None."""

    @abc.abstractmethod
    def register(
        self, address: int, chan: int, queues: Sequence[str], slots: int, callback: Answer
    ) -> None:
        """Offer ``slots`` of channel ``chan`` of the waiter at ``address`` to publishers
        of ``queues`` (hand-off); no queues withdraws it. ``callback`` gets None."""

    @abc.abstractmethod
    def lease_acquire(self, name: str, owner: str, ttl: float, callback: Answer) -> None:
        """:meth:`Store.lease_acquire`: ``callback`` gets a bool."""

    @abc.abstractmethod
    def maintain_round(self, callback: Answer) -> None:
        """:meth:`Store.maintain_round`: ``callback`` gets its list of results."""


def _is_number(value: Any) -> bool:
    """A real, finite number (NaN and infinities are refused, as bools are)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_queue_args(name: str, message_ttl: float | None, expires: float | None) -> None:
    """Validate a queue declaration; raise :class:`ConfigurationError` naming the bad value."""
    validate_name(name, "queue name")
    for what, value in (("message_ttl", message_ttl), ("expires", expires)):
        if value is not None and (not _is_number(value) or not value > 0):
            raise ConfigurationError(
                f"queue {name!r}: {what} must be a positive number of seconds, got {value!r}"
            )


def check_lease_ttl(ttl: Any) -> None:
    if not _is_number(ttl) or not ttl > 0:
        raise ConfigurationError(f"lease ttl must be a positive number of seconds, got {ttl!r}")


def _handles(deliveries: Iterable[Delivery]) -> list[Delivery]:
    return list(deliveries)


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
_UPSERT_FIELDS = ("name", "spec", "interval", "task", "args", "kwargs", "options", "next_at")
_UPSERT_FIELDS += ("origin", "kind", "tz")


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
        self.conn.execute("SAVEPOINT alkstore_fire")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO SAVEPOINT alkstore_fire")
            self.conn.execute("RELEASE SAVEPOINT alkstore_fire")
            raise
        self.conn.execute("RELEASE SAVEPOINT alkstore_fire")


class Store(abc.ABC):
    """Queue tables on one database. Thread-safe; one instance per process is enough.

    An engine is a package under ``store/`` (``postgres/``, ``sqlite/``) implementing the
    abstract methods, with its SQL in ``.sql`` files defining at least
    :data:`STATEMENTS`. Callers learn what it can do from :attr:`capabilities` and which
    exceptions mean a lost database from :attr:`connection_errors`; none of them tests
    the engine's name or imports its driver.
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

    # ------------------------------------------------------------ statements
    # Engines run their named statements (``.sql`` files, see :mod:`.sqlfile`) here;
    # every row comes back as a mapping by column name.
    @abc.abstractmethod
    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[Row]:
        """Run the engine's statement ``key``; all rows."""

    @abc.abstractmethod
    def _one(self, key: str, params: dict[str, Any] | None = None) -> Row | None:
        """Run the engine's statement ``key``; the first row or None."""

    @abc.abstractmethod
    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        """Run the engine's statement ``key``; the row count."""

    def _value(self, key: str, params: dict[str, Any] | None = None) -> Any:
        """The single column of the first row of statement ``key``, or None."""
        row = self._one(key, params)
        return None if row is None else next(iter(row.values()))

    def _column(self, key: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The single column of every row of statement ``key``."""
        return [next(iter(r.values())) for r in self._all(key, params)]

    @staticmethod
    def _array(values: list[Any]) -> Any:
        """A list as the engine binds it (PostgreSQL: an array; SQLite: JSON text)."""
        return values

    # ---------------------------------------------------------------- enqueue
    def enqueue(self, queue: str, body: bytes | str, **kwargs: Any) -> int:
        """Enqueue one job (see :class:`NewJob` for the keyword arguments); return its id."""
        return self.enqueue_many([NewJob(queue, body, **kwargs)])[0]

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Enqueue jobs atomically (all or none); return their ids in order.

        Missing ``visibility_timeout``/``max_attempts``/``backoff_base`` are stamped from
        the queue's options, then the store's; a queue ``message_ttl`` sets ``expires_at``.
        Workers waiting on these queues are woken when the jobs commit.
        """
        checked = [job.checked() for job in jobs]
        if not checked:
            return []
        ids = self._insert(checked)
        self.rates_tally.published([j.queue for j in checked])
        return ids

    def publish(self, jobs: Sequence[NewJob]) -> None:
        """Enqueue for a producer: :meth:`enqueue_many`, except that an engine may
        return before the commit is confirmed when ``confirm_publish`` is off."""
        self.enqueue_many(jobs)

    def flush_publishes(self) -> None:  # noqa: B027 - engines that confirm as they publish
        """Wait until every publish of this process is confirmed (see :meth:`publish`)."""

    @abc.abstractmethod
    def _insert(self, jobs: list[NewJob]) -> list[int]: ...

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
        if extend is not None and (not _is_number(extend) or extend <= 0):
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
        if delay is not None and (not _is_number(delay) or delay < 0):
            raise ConfigurationError(f"retry delay must be a number >= 0, got {delay!r}")
        pend, spent = [], []
        for d in deliveries:
            if d.attempts >= d.max_attempts:
                spent.append(d)
                continue
            if delay is not None:
                wait = float(delay)
            elif first_immediate and d.attempts <= 1:
                wait = 0.0
            else:
                wait = backoff_delay(d.attempts, d.backoff_base)
            pend.append((d, wait, 0))
        landed = self._pend_held(pend) if pend else set()
        if spent:
            landed |= self._kill_held(spent, error)
        return landed

    def fail(self, deliveries: Iterable[Delivery], error: str) -> set[int]:
        """Move jobs to the dead letters with ``error``."""
        return self._kill_held(_handles(deliveries), str(error))

    def revoke(self, task_ids: Sequence[str]) -> int:
        """Record that the tasks ``task_ids`` are revoked on their jobs still in the store
        (pending, delayed or held), so every later claim delivers them marked revoked.
        Returns how many jobs were marked. A job published after its revoke is not marked
        (the workers' own revoked lists cover that, as on other brokers)."""
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

    def sweep(self) -> SweepResult:
        """Every maintenance job once (the CLI's ``sweep``; workers run them under a
        lease, see :mod:`kombu_alkstore.maintenance`)."""
        done = {r.job: r for r in self.maintain_round()}
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

    def purge(self, queue: str) -> int:
        """Delete the queue's pending jobs; return how many."""
        return self._run("purge", {"queue": queue})

    @abc.abstractmethod
    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Dead letters, newest first."""

    @abc.abstractmethod
    def dead_requeue(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        """Move dead letters back to pending (attempts reset); ``ids=None`` means all
        (of ``queue`` when given). Returns how many moved."""

    @abc.abstractmethod
    def dead_purge(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        """Delete dead letters; ``ids=None`` means all (of ``queue`` when given)."""

    # ------------------------------------------- pause, dashboard reads (web/)
    def pause_queue(self, name: str) -> bool:
        """Pause ``name``: claims and hand-offs skip it, publishes still land; kept until
        :meth:`resume_queue` (across restarts). False when it was paused already."""
        validate_name(name, "queue name")
        return bool(self._all("queue_pause", {"name": name}))

    def resume_queue(self, name: str) -> bool:
        """Resume a paused queue and wake its consumers; False when it was not paused."""
        validate_name(name, "queue name")
        return bool(self._all("queue_resume", {"name": name}))

    def paused_queues(self) -> dict[str, float]:
        """Paused queue names and when each was paused (epoch seconds)."""
        return {r["queue"]: r["paused_at"] for r in self._all("paused_list")}

    def peek(self, queue: str, limit: int = 20) -> list[Job]:
        """The next ``limit`` pending jobs of ``queue`` in claim order (delayed ones too,
        by their priority and due time), without claiming them."""
        return [Job(**r) for r in self._all("peek", {"queue": queue, "limit": int(limit)})]

    def dead_search(
        self,
        where: DeadFilter = ANY_DEAD,
        limit: int = 50,
        before: tuple[float, int] | None = None,
        scan: int | None = None,
    ) -> list[Job]:
        """Dead letters matching ``where``, newest first; ``before`` = ``(died_at, id)``
        of the last one of the previous page. With ``scan``, only the ``scan`` newest dead
        letters (from ``before`` on) are looked at, so a filter no index serves (task name,
        error text) reads a bounded number of rows; :meth:`dead_window` says where the next
        window starts."""
        params = {**where.params(), "limit": int(limit)}
        params["b_at"], params["b_id"] = before if before else (None, None)
        if scan is None:
            return [Job(**r) for r in self._all("dead_search", params)]
        params["scan"] = int(scan)
        return [Job(**r) for r in self._all("dead_search_window", params)]

    def dead_window(self, scan: int, before: tuple[float, int] | None = None) -> tuple | None:
        """``(died_at, id)`` of the last of the ``scan`` newest dead letters from ``before``
        on (the ``before`` of the next window), or None when no more remain after them."""
        b_at, b_id = before if before else (None, None)
        rows = self._all("dead_window", {"b_at": b_at, "b_id": b_id, "scan": int(scan)})
        return (rows[0]["died_at"], rows[0]["id"]) if len(rows) == 2 else None

    def dead_count(self, where: DeadFilter = ANY_DEAD, cap: int | None = None) -> int:
        """How many dead letters match ``where`` (counting stops at ``cap`` when given)."""
        return int(self._value("dead_count", {**where.params(), "cap": cap}) or 0)

    def dead_ids(
        self, where: DeadFilter = ANY_DEAD, after: int = 0, limit: int = 1000
    ) -> list[int]:
        """Ids of the dead letters matching ``where`` above ``after``, ascending: the
        batches of a bulk requeue or purge."""
        params = {**where.params(), "after": int(after), "limit": int(limit)}
        return [int(i) for i in self._column("dead_ids", params)]

    @abc.abstractmethod
    def dead_move(self, ids: Sequence[int], queue: str) -> int:
        """Requeue the dead letters ``ids`` to another ``queue`` (attempts reset)."""

    def claim_stats(self) -> list[ClaimStat]:
        """Per queue: claims held (processing jobs) and idle consumers' offers."""
        return [ClaimStat(**r) for r in self._all("claim_stats")]

    def rate_points(self, since: float) -> list[RatePoint]:
        """Per-minute publish and ack counts from ``since`` on, by minute and queue."""
        return [RatePoint(**r) for r in self._all("rates_since", {"since": since})]

    def rate_totals(self) -> list[RatePoint]:
        """Publish and ack totals per queue since the ``rates`` table was made."""
        return [RatePoint(**r) for r in self._all("rates_totals", {"total": TOTAL_MINUTE})]

    def trim_rates(self, older_than: float) -> int:
        """Delete per-minute rate rows before ``older_than`` (totals are kept)."""
        return self._run("rates_trim", {"before": older_than})

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
    def touch_queues(self, names: Sequence[str]) -> None:
        """Mark queues as used now (keeps ``x-expires`` queues of live consumers)."""

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
    @abc.abstractmethod
    def waiter(self) -> Waiter:
        """A new wake-up source announcing enqueued work on any queue."""

    def session(self) -> ClaimSession | None:
        """A new connection for claims and acks that do not block an event loop, when
        :attr:`capabilities` has ``session``; None otherwise (claims block)."""
        return None

    # -------------------------------------------------------------- schedules
    def schedule_upsert(self, row: ScheduleRow, keep_grid: bool = True) -> None:
        """Insert or update a schedule. With ``keep_grid`` an existing row whose kind, spec
        and time zone are unchanged keeps its stored ``next_at`` (its grid survives
        restarts). The lifecycle columns (enabled, last run, run count, last error, a
        pending run-now) are never changed by an upsert."""
        params = {f: getattr(row, f) for f in _UPSERT_FIELDS}
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

    @staticmethod
    def now() -> float:
        return time.time()
