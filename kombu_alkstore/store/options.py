"""Store options and URL parsing: every bad value is refused with an error naming it."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import ConfigurationError
from .engines import Engine, engine_for_scheme, engine_named, engines, titles

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")
#: Longest queue/exchange/routing-key/schedule name accepted, in UTF-8 bytes (an index
#: entry on PostgreSQL holds at most about 2,700 bytes).
MAX_NAME_LENGTH = 1024


@dataclass(frozen=True)
class StoreOptions:
    """Per-store settings; the queue defaults are stamped on each job at enqueue."""

    schema: str = "alkstore"
    visibility_timeout: float = 300.0
    max_attempts: int = 3
    backoff_base: float = 5.0
    dead_letter_retention: float | None = None
    #: Seconds an operator's act is kept (store/acts.py): the maintenance holder trims
    #: older ones; None keeps every act. Default: 400 days.
    acts_retention: float | None = 400 * 86400.0
    #: A queue with ``x-expires`` is dropped no sooner than this long after its last use:
    #: live consumers refresh their queues on the (≤ 60 s) sweep timer, so a shorter
    #: expiry alone would drop the queues of running workers.
    queue_expiry_grace: float = 120.0
    #: The most rows one maintenance job deletes from a table in one run (one statement
    #: holds its locks and its WAL that long); a job that hit it runs again at once, in
    #: the same round, until it deletes fewer.
    maintenance_batch: int = 10_000
    #: PostgreSQL: publishes wait for the WAL flush. Off: ``synchronous_commit=off`` for
    #: publishes too, faster, but a database crash may lose the last moments of publishes.
    durable_publish: bool = True
    #: PostgreSQL: a publish returns once its commit is confirmed. Off: publishes are
    #: pipelined and confirmed later (see ``store/postgres/publisher.py``), as RabbitMQ without
    #: publisher confirms: much faster, but a publisher killed within a round trip of
    #: a publish can lose it.
    confirm_publish: bool = True
    #: Create the tables on connect; turn off where the role may not create tables.
    setup: bool = True
    #: SQLite: how long a writer waits for the lock, in seconds.
    busy_timeout: float = 30.0
    #: PostgreSQL: the largest number of pooled connections per store.
    pool_max_size: int = 4
    #: PostgreSQL: seconds a pooled connection may stay unused before it is closed, so a
    #: prefork child or a web process that published once does not hold a connection
    #: for its lifetime (the next publish after that reconnects, a few milliseconds).
    #: The pool closes at most one connection per such period.
    pool_max_idle: float = 10.0
    #: PostgreSQL: the broker URL reaches the database through a transaction-mode pooler
    #: (PgBouncer ``pool_mode = transaction``): no server-side prepared statements and no
    #: session startup options (claims and acks then commit durably, a little slower).
    #: ``LISTEN`` and the live-waiter lock need a session: see ``listen_url``.
    transaction_pooler: bool = False
    #: PostgreSQL: a direct URL (not through a transaction-mode pooler) for the
    #: connections that need a session of their own: a worker's ``LISTEN`` connection,
    #: which also holds the lock that marks its hand-off offers live. Empty: the broker URL.
    listen_url: str = ""
    #: PostgreSQL: a claim starts where this process's last claim of the queue (and
    #: priority) ended, at that job's due time less this many seconds (its claim floor),
    #: so it does not walk the dead index entries a pinned xmin horizon keeps (see
    #: ``store/postgres/floors.py``). A publish committed late behind it is found by its
    #: notification, else by the next full claim or look (``claim_floor_rescan``); a
    #: margin finds those within it at once even unheard, but behind a pinned horizon
    #: each claim then visits every job claimed in that many seconds (a heap page each).
    claim_floor_margin: float = 0.0
    #: PostgreSQL: with claim floors, what lies behind them is looked for from the head
    #: at least this often (seconds): by the queue's next claim, or with
    #: the floors' watch (``claim_floor_watch``) every half of it. So what a floor
    #: may have skipped unheard (a claim rolled back elsewhere, a notification missed) waits
    #: at most this long. 0: no claim floors, every claim walks from the head.
    claim_floor_rescan: float = 10.0
    #: PostgreSQL: a worker looks behind its claim floors from a thread of its own
    #: (``store/postgres/lookbehind.py``), every ``claim_floor_rescan`` / 2 seconds on a
    #: pooled connection, instead of one claim from the head per queue every
    #: ``claim_floor_rescan``, while those claims are slow (``claim_floor_watch_after``).
    #: Behind a pinned horizon that walk grows with every dead entry, and on the claims
    #: connection the claims and acks pipelined after it wait for it; the watch costs one
    #: more connection per busy worker process while it runs. False: never.
    claim_floor_watch: bool = True
    #: PostgreSQL: the watch starts once two claims from the head in a row each took this
    #: long on the server (seconds), and stops after a look that took less than half of
    #: it (or had nothing to look at). 0: it runs from a worker's first claim on.
    claim_floor_watch_after: float = 0.025

    def __post_init__(self) -> None:
        validate_identifier(self.schema, "schema")
        if self.listen_url:
            try:
                listens = parse_store_url(self.listen_url).description.listen_url
            except ConfigurationError:
                listens = False
            if not listens:
                raise ConfigurationError(
                    f"option listen_url must be a {titles(lambda e: e.listen_url)} URL, "
                    f"got {self.listen_url!r}"
                )
        _positive(self.visibility_timeout, "visibility_timeout")
        _positive(self.backoff_base, "backoff_base")
        _positive(self.busy_timeout, "busy_timeout")
        if (
            isinstance(self.queue_expiry_grace, bool)
            or not isinstance(self.queue_expiry_grace, (int, float))
            or self.queue_expiry_grace < 0
        ):
            raise ConfigurationError(
                f"option queue_expiry_grace must be a number >= 0, got {self.queue_expiry_grace!r}"
            )
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(
                f"option max_attempts must be an integer >= 1, got {self.max_attempts!r}"
            )
        if not isinstance(self.maintenance_batch, int) or self.maintenance_batch < 1:
            raise ConfigurationError(
                f"option maintenance_batch must be an integer >= 1, got {self.maintenance_batch!r}"
            )
        if not isinstance(self.pool_max_size, int) or self.pool_max_size < 1:
            raise ConfigurationError(
                f"option pool_max_size must be an integer >= 1, got {self.pool_max_size!r}"
            )
        if self.dead_letter_retention is not None:
            _positive(self.dead_letter_retention, "dead_letter_retention")
        if self.acts_retention is not None:
            _positive(self.acts_retention, "acts_retention")
        _positive(self.pool_max_idle, "pool_max_idle")
        _non_negative(self.claim_floor_margin, "claim_floor_margin")
        _non_negative(self.claim_floor_rescan, "claim_floor_rescan")
        _non_negative(self.claim_floor_watch_after, "claim_floor_watch_after")

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> StoreOptions:
        """Build options from a mapping, coercing strings (``"30"``, ``"false"``) to types."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in values and values[f.name] is not None:
                kwargs[f.name] = coerce_option(f.name, values[f.name], f.default)
        return cls(**kwargs)


def coerce_option(name: str, value: Any, default: Any) -> Any:
    """Coerce ``value`` to the type of ``default``; raise naming ``name`` when it cannot."""
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                lowered = value.strip().lower()
                if lowered in {"1", "true", "yes", "on"}:
                    return True
                if lowered in {"0", "false", "no", "off"}:
                    return False
                raise ValueError(value)
            return bool(value)
        if isinstance(default, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if isinstance(default, float) or default is None:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"option {name} has a bad value {value!r}") from None


def is_finite_number(value: Any) -> bool:
    """A real, finite number (not a bool, not NaN or infinity)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _positive(value: Any, name: str) -> None:
    if not is_finite_number(value) or not value > 0:
        raise ConfigurationError(f"option {name} must be a positive, finite number, got {value!r}")


def _non_negative(value: Any, name: str) -> None:
    if not is_finite_number(value) or value < 0:
        raise ConfigurationError(f"option {name} must be a finite number >= 0, got {value!r}")


def validate_identifier(value: Any, what: str) -> str:
    """Accept a plain SQL identifier (letters, digits, underscore; at most 48 chars)."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ConfigurationError(
            f"{what} {value!r} is not a valid identifier "
            "(letters, digits and underscores, not starting with a digit, at most 48 characters)"
        )
    return value


def validate_name(value: Any, what: str = "queue name") -> str:
    """Accept any non-empty text a database can store as data; refuse the rest clearly."""
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string, got {value!r}")
    if not value:
        raise ConfigurationError(f"{what} must not be empty")
    if "\x00" in value:
        raise ConfigurationError(f"{what} {value!r} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigurationError(f"{what} {value!r} is not valid unicode text") from None
    if size > MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"{what} is {size} bytes long in UTF-8; at most {MAX_NAME_LENGTH} are allowed: "
            f"{value[:40]!r}..."
        )
    return value


def check_text_params(params: dict[str, Any]) -> None:
    """Refuse, naming it, a text parameter the database cannot hold (NUL, lone surrogate),
    whatever the operation: lookups bind names they never validated as new names."""
    for key, value in params.items():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(v, str):
                continue
            what = _PARAM_NAMES.get(key, key)
            if "\x00" in v:
                raise ConfigurationError(f"{what} {v!r} contains a NUL character")
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise ConfigurationError(f"{what} {v!r} is not valid unicode text") from None


#: How the store's SQL parameters are named to a user.
_PARAM_NAMES = {
    "queue": "queue name",
    "queues": "queue name",
    "names": "queue name",
    "name": "queue, exchange name or schedule name",
    "exchange": "exchange name",
    "rk": "routing key",
    "id": "message id",
    "msg_id": "message id",
    "owner": "lease owner",
}


@dataclass(frozen=True)
class StoreURL:
    """A parsed database URL: which engine, and how to reach it."""

    engine: str  # the engine's name: "postgresql" or "sqlite" (for display)
    url: URL

    @property
    def description(self) -> Engine:
        """The engine serving this URL, as its package describes it (see :mod:`.engines`)."""
        return engine_named(self.engine)

    @property
    def conninfo(self) -> str:
        """The driver's connection string (password included). PostgreSQL: libpq's, for
        psycopg; several hosts (``postgresql://u@h1:5432,h2:5432/db`` or SQLAlchemy's
        ``?host=h1:5432&host=h2:5432``) become libpq's comma-separated ``host`` and
        ``port`` lists, so ``target_session_attrs=read-write`` fails over between them.
        """
        return self.description.conninfo(self.url)

    def same_database(self, other: StoreURL) -> bool:
        """Whether ``other`` reaches the same database: the same engine and, for a file
        engine, the same file (by real path), otherwise the same URL."""
        if self.description is not other.description:
            return False
        if self.description.file:
            return os.path.realpath(self.path) == os.path.realpath(other.path)
        mine, theirs = (u.url.render_as_string(hide_password=False) for u in (self, other))
        return mine == theirs

    @property
    def path(self) -> str:
        """SQLite: the database file path."""
        return self.url.database or ""

    def masked(self) -> str:
        return self.url.render_as_string(hide_password=True)


def _hosts_to_query(url: str) -> str:
    """``scheme://user@h1:p1,h2:p2/db?q`` (libpq's multi-host form, which SQLAlchemy's
    parser refuses) as ``scheme://user@/db?host=h1:p1&host=h2:p2&q`` (SQLAlchemy's)."""
    match = re.match(r"^([^:/]+://)(?:([^@/]*)@)?([^/?]*,[^/?]*)(/[^?]*)?(?:\?(.*))?$", url)
    if not match:
        return url
    scheme, auth, hosts, path, query = match.groups()
    extra = "&".join(f"host={h}" for h in hosts.split(",") if h)
    query = f"{extra}&{query}" if query else extra
    return f"{scheme}{auth + '@' if auth is not None else ''}{path or '/'}?{query}"


def parse_store_url(url: str | URL) -> StoreURL:
    """Parse ``postgresql://…`` or ``sqlite:///file.db`` (SQLAlchemy URL syntax; several
    PostgreSQL hosts as libpq writes them, ``postgresql://u@h1:5432,h2:5432/db``)."""
    if isinstance(url, str) and "," in url.split("?", 1)[0]:
        url = _hosts_to_query(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"bad database URL {str(url)!r}: {exc}") from None
    driver = parsed.drivername
    engine = engine_for_scheme(driver)
    if engine is None:
        suggested = " or ".join(e.example for e in engines())
        raise ConfigurationError(
            f"bad database URL {parsed.render_as_string()!r}: unsupported scheme {driver!r} "
            f"(use {suggested})"
        )
    engine.check_url(parsed, url)
    return StoreURL(engine.name, parsed)
