"""The store's value types: what goes in (:class:`NewJob`), what comes out
(:class:`Delivery`, :class:`Job`, :class:`QueueCounts`, the maintenance results) and what
an engine declares it can do (:class:`Capabilities`).

All are plain frozen dataclasses: a value never changes once made, so callers may keep
and share them between threads. :meth:`NewJob.checked` is the one place a job's fields
are validated (each bad one refused by name with :class:`ConfigurationError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .checks import is_number
from .options import validate_name
from .unique import check_key

EXCHANGE_TYPES = ("direct", "topic", "fanout")

#: A row as the engines return it: a mapping by column name.
Row = Mapping[str, Any]

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
    #: ``jobs`` is kept in generations that the maintenance lease holder rotates
    #: (:meth:`Store.rotate_generation`), so dead row versions stay bounded.
    generations: bool = False


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    """What one maintenance job did: the rows it moved or deleted (``count``), the
    expired jobs of transient queues it dropped (``dropped``, job ``expire``) and the
    queues it dropped (``queues``, job ``expired_queues``). Each job deletes at most
    ``maintenance_batch`` rows of a table per run (``more`` when it may have left some)."""

    job: str
    count: int = 0
    dropped: int = 0
    queues: tuple[str, ...] = ()
    #: The job hit its batch bound (``maintenance_batch`` rows): run it again.
    more: bool = False


@dataclass(frozen=True, slots=True)
class NewJob:
    """A message to enqueue. ``run_at``/``expires_at`` are absolute epoch seconds.

    ``unique_key``: while a job of ``queue`` holding this key is live, this one is not
    enqueued (see :mod:`.unique`); ``unique_claimed``: whether the key still counts once
    the job is claimed (False: it holds the key only while pending or delayed).
    """

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
    unique_key: str | None = None
    unique_claimed: bool = True

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
        if self.delay is not None and (not is_number(self.delay) or self.delay < 0):
            raise ConfigurationError(f"delay must be a number >= 0, got {self.delay!r}")
        for name in ("run_at", "expires_at"):
            value = getattr(self, name)
            if value is not None and not is_number(value):
                raise ConfigurationError(f"{name} must be epoch seconds, got {value!r}")
        for name in ("visibility_timeout", "backoff_base"):
            value = getattr(self, name)
            if value is not None and (not is_number(value) or value <= 0):
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
        check_key(self.unique_key, "unique_key")
        if not isinstance(self.unique_claimed, bool):
            raise ConfigurationError(
                f"unique_claimed must be True or False, got {self.unique_claimed!r}"
            )
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
