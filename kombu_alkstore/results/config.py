"""Which database and which store options a result backend uses.

``result_backend`` URL forms (Celery strips ``alkstore+`` and hands the rest over):

* ``alkstore+postgresql://…`` / ``alkstore+sqlite:///file.db``: that database;
* ``alkstore://`` (or the class path, no URL): the broker's database (``broker_url``
  must then be an alkstore URL).

Store options (``schema``, ``setup``, ``pool_max_size``, ``listen_url``,
``transaction_pooler``, ``busy_timeout``…): when the database is the broker's, the
broker's ``broker_transport_options`` apply first, so results land in the broker's schema
and share its connection pool; ``result_backend_transport_options`` override them. The
backend's own options there: ``fallback_interval`` (seconds between the batched safety
read of every pending result; default 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..store import StoreOptions, StoreURL, parse_store_url
from ..store.options import coerce_option

#: Options of the backend itself in ``result_backend_transport_options``.
BACKEND_OPTIONS = {"fallback_interval": 5.0}


@dataclass(frozen=True)
class ResultConfig:
    """A backend's database, its store options, and whether the broker shares them."""

    url: StoreURL
    options: StoreOptions
    #: The broker is an alkstore on this very database and schema: a chord's callback
    #: publish can commit in the transaction that counts its last part.
    shares_broker: bool
    fallback_interval: float


def _strip(url: str | None) -> str | None:
    if not url:
        return None
    if url.startswith("alkstore+"):
        return url[len("alkstore+") :]
    if url.split("://", 1)[0] == "alkstore":
        return None  # alkstore:// : the broker's database
    return url if "://" in url else None


def _store_subset(raw: dict[str, Any] | None) -> dict[str, Any]:
    names = StoreOptions.names()
    return {k: v for k, v in (raw or {}).items() if k in names}


def broker_store_url(conf: Any) -> StoreURL | None:
    """The broker's database when the broker is an alkstore, else None."""
    url = conf.broker_url
    url = url[0] if isinstance(url, (list, tuple)) else url
    if not isinstance(url, str):
        return None
    transport = conf.broker_transport or ""
    if url.startswith("alkstore+"):
        url = url[len("alkstore+") :]
    elif not str(transport).startswith("kombu_alkstore"):
        return None
    try:
        return parse_store_url(url)
    except ConfigurationError:
        return None


def resolve(conf: Any, url: str | None) -> ResultConfig:
    """The backend's configuration from Celery's ``conf`` and the URL Celery passed."""
    broker = broker_store_url(conf)
    given = _strip(url)
    if given is None:
        if broker is None:
            raise ConfigurationError(
                f"result_backend {url or conf.result_backend!r} names no database and the "
                "broker is not an alkstore: use alkstore+postgresql://… or "
                "alkstore+sqlite:///file.db"
            )
        target = broker
    else:
        target = parse_store_url(given)
    same = broker is not None and broker.same_database(target)
    raw: dict[str, Any] = _store_subset(conf.broker_transport_options) if same else {}
    mine = dict(conf.get("result_backend_transport_options") or {})
    raw.update(_store_subset(mine))
    try:
        options = StoreOptions.from_mapping(raw)
    except ConfigurationError as exc:
        raise ConfigurationError(f"result backend {exc}") from None
    fallback = coerce_option(
        "fallback_interval",
        mine.get("fallback_interval", BACKEND_OPTIONS["fallback_interval"]),
        1.0,
    )
    if fallback <= 0:
        raise ConfigurationError(f"option fallback_interval must be > 0, got {fallback!r}")
    broker_schema = StoreOptions.from_mapping(_store_subset(conf.broker_transport_options)).schema
    return ResultConfig(target, options, same and broker_schema == options.schema, fallback)
