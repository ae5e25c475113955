"""Store options and URL parsing: every bad value is refused with an error naming it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import ConfigurationError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")
#: Longest queue/exchange/routing-key/schedule name accepted, in UTF-8 bytes (an index
#: entry on PostgreSQL holds at most about 2,700 bytes).
MAX_NAME_LENGTH = 1024

POSTGRES_DRIVERS = {"postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"}
SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}


@dataclass(frozen=True)
class StoreOptions:
    """Per-store settings; the queue defaults are stamped on each job at enqueue."""

    schema: str = "alkstore"
    visibility_timeout: float = 300.0
    max_attempts: int = 3
    backoff_base: float = 5.0
    dead_letter_retention: float | None = None
    #: A queue with ``x-expires`` is dropped no sooner than this long after its last use:
    #: live consumers refresh their queues on the (≤ 60 s) sweep timer, so a shorter
    #: expiry alone would drop the queues of running workers.
    queue_expiry_grace: float = 120.0
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

    def __post_init__(self) -> None:
        validate_identifier(self.schema, "schema")
        if self.listen_url:
            try:
                engine = parse_store_url(self.listen_url).engine
            except ConfigurationError:
                engine = None
            if engine != "postgresql":
                raise ConfigurationError(
                    f"option listen_url must be a PostgreSQL URL, got {self.listen_url!r}"
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
        if not isinstance(self.pool_max_size, int) or self.pool_max_size < 1:
            raise ConfigurationError(
                f"option pool_max_size must be an integer >= 1, got {self.pool_max_size!r}"
            )
        if self.dead_letter_retention is not None:
            _positive(self.dead_letter_retention, "dead_letter_retention")
        _positive(self.pool_max_idle, "pool_max_idle")

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

    engine: str  # "postgresql" or "sqlite"
    url: URL

    @property
    def conninfo(self) -> str:
        """PostgreSQL: a libpq connection string (password included) for psycopg.

        Several hosts (``postgresql://u@h1:5432,h2:5432/db`` or SQLAlchemy's
        ``?host=h1:5432&host=h2:5432``) become libpq's comma-separated ``host`` and
        ``port`` lists, so ``target_session_attrs=read-write`` fails over between them.
        """
        return postgres_conninfo(self.url)

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


def postgres_conninfo(url: URL) -> str:
    """The libpq connection string for a PostgreSQL ``url`` (see ``StoreURL.conninfo``)."""
    from psycopg.conninfo import make_conninfo

    params: dict[str, Any] = {}
    hosts = url.query.get("host")
    if hosts is not None:
        hosts = hosts if isinstance(hosts, tuple) else (hosts,)
        names, ports = [], []
        for entry in hosts:
            name, _, port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
            names.append(name or entry)
            ports.append(port)
        params["host"] = ",".join(names)
        if any(ports):
            params["port"] = ",".join(p or str(url.port or 5432) for p in ports)
    elif url.host:
        params["host"] = url.host
    if url.port and "port" not in params:
        params["port"] = str(url.port)
    if url.username:
        params["user"] = url.username
    if url.password is not None:
        params["password"] = str(url.password)
    if url.database:
        params["dbname"] = url.database
    for key, value in url.query.items():
        if key != "host":
            params[key] = value[-1] if isinstance(value, tuple) else value
    # Names our connections in pg_stat_activity (operators count them by it).
    params.setdefault("application_name", "kombu-alkstore")
    return make_conninfo("", **params)


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
    if driver in POSTGRES_DRIVERS:
        _check_postgres_query(parsed)
        return StoreURL("postgresql", parsed)
    if driver in SQLITE_DRIVERS:
        if parsed.query:
            raise ConfigurationError(
                f"bad database URL {parsed.render_as_string()!r}: SQLite takes no query "
                f"parameters, got {', '.join(sorted(parsed.query))} (set options such as "
                "busy_timeout in broker_transport_options)"
            )
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigurationError(
                f"bad database URL {str(url)!r}: SQLite needs a file (sqlite:///path.db); "
                "an in-memory database cannot be shared by a worker and its clients"
            )
        return StoreURL("sqlite", parsed)
    raise ConfigurationError(
        f"bad database URL {parsed.render_as_string()!r}: unsupported scheme {driver!r} "
        "(use postgresql://… or sqlite:///…)"
    )


#: libpq connection parameters whose value must be an integer (a bad one is refused at
#: start, not retried as a connection error forever).
_PG_INTEGER_PARAMS = frozenset(
    {
        "connect_timeout",
        "port",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)


def _check_postgres_query(url: URL) -> None:
    """Refuse, naming it, a query parameter libpq does not know or a malformed number."""
    from psycopg import conninfo

    for key, value in url.query.items():
        values = value if isinstance(value, tuple) else (value,)
        if key in _PG_INTEGER_PARAMS and not all(re.fullmatch(r"-?\d+", v) for v in values):
            raise ConfigurationError(
                f"bad database URL {url.render_as_string()!r}: {key} must be an integer, "
                f"got {value!r}"
            )
    try:
        conninfo.conninfo_to_dict(postgres_conninfo(url))
    except Exception as exc:  # psycopg.ProgrammingError: libpq's own words
        raise ConfigurationError(
            f"bad database URL {url.render_as_string()!r}: {str(exc).strip()}"
        ) from None
