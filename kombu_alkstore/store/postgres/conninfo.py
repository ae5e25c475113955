"""PostgreSQL URLs: the libpq connection string a URL becomes, and the check that
refuses a bad one at start-up (naming it) rather than retrying it as a lost connection."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from psycopg import conninfo as libpq
from sqlalchemy.engine import URL

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from ..options import StoreOptions, StoreURL

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


def conninfo(url: URL) -> str:
    """The libpq connection string (password included) for a PostgreSQL ``url``.

    Several hosts (``postgresql://u@h1:5432,h2:5432/db`` or SQLAlchemy's
    ``?host=h1:5432&host=h2:5432``) become libpq's comma-separated ``host`` and ``port``
    lists, so ``target_session_attrs=read-write`` fails over between them; every other
    query parameter is passed on, and ``application_name`` defaults to ours.
    """
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
    return libpq.make_conninfo("", **params)


def check_url(url: URL, given: Any = None) -> None:
    """Refuse, naming it, a query parameter libpq does not know or a malformed number."""
    for key, value in url.query.items():
        values = value if isinstance(value, tuple) else (value,)
        if key in _PG_INTEGER_PARAMS and not all(re.fullmatch(r"-?\d+", v) for v in values):
            raise ConfigurationError(
                f"bad database URL {url.render_as_string()!r}: {key} must be an integer, "
                f"got {value!r}"
            )
    try:
        libpq.conninfo_to_dict(conninfo(url))
    except Exception as exc:  # psycopg.ProgrammingError: libpq's own words
        raise ConfigurationError(
            f"bad database URL {url.render_as_string()!r}: {str(exc).strip()}"
        ) from None


def privileges_missing(exc: Exception, url: StoreURL, options: StoreOptions) -> ConfigurationError:
    """One line for a role that may not set up or use the store's tables: what
    PostgreSQL said, and what the README says to do (not a connection error: retrying
    cannot help)."""
    said = str(exc).strip().splitlines()[0]
    role = url.url.username or "this role"
    return ConfigurationError(
        f"PostgreSQL refused {role!r} on schema {options.schema!r} ({said}): as the "
        f"schema's owner run `kombu-alkstore -b URL --schema {options.schema} setup "
        f"--print --grant {role}` and apply it, then give this role the transport option "
        "setup=False (README: PostgreSQL setup and least privilege)"
    )
