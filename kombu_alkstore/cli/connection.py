"""From ``-b/--broker`` and ``--schema`` to an open store (nothing created unless asked)."""

from __future__ import annotations

import argparse
import json

from ..errors import ConfigurationError
from ..store import Store, StoreURL, open_store
from ..store.options import parse_store_url, validate_identifier
from ..tables.router import route_tables
from ..tables.spec import TableSpec, parse_tables
from .errors import CLIError

#: URL schemes that are a database URL already (``postgresql+psycopg://`` names a driver).
DATABASE_SCHEMES = frozenset({"postgresql", "postgres", "sqlite"})


def store_url(broker: str | None) -> str:
    """The database URL inside a broker URL (``alkstore+postgresql://…`` → ``postgresql://…``).

    A plain database URL is returned as given (stripped); CLIError for no URL, a string
    that is not a URL, or another transport's URL (its password masked in the message).
    """
    if not broker:
        raise CLIError("no broker URL: pass -b/--broker URL or set CELERY_BROKER_URL")
    broker = broker.strip()
    scheme, sep, _ = broker.partition("://")
    if not sep:
        raise CLIError(
            f"bad broker URL {broker!r}: expected alkstore+postgresql://… or alkstore+sqlite:///…"
        )
    if "+" in scheme and scheme.partition("+")[0] not in DATABASE_SCHEMES:
        transport, _, rest = broker.partition("+")
        if transport != "alkstore":
            raise CLIError(
                f"broker URL {_mask(broker)!r} is for the {transport!r} transport, "
                "not alkstore (use alkstore+postgresql://… or alkstore+sqlite:///…)"
            )
        broker = rest
    return broker


def _mask(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        prefix = ""
        if "+" in url.partition("://")[0] and url.startswith("alkstore+"):
            prefix, url = "alkstore+", url[len("alkstore+") :]
        return prefix + make_url(url).render_as_string(hide_password=True)
    except Exception:  # unparseable: show it without any password-looking part
        head, at, tail = url.rpartition("@")
        return f"{head.split(':')[0]}:***@{tail}" if at else url


def parse(url: str) -> StoreURL:
    """The store URL ``url`` names (:func:`kombu_alkstore.store.options.parse_store_url`)."""
    return parse_store_url(url)


def open_cli_store(args: argparse.Namespace, setup: bool = False) -> Store:
    """Open the store named by ``-b`` without creating anything (unless ``setup``); with
    ``--tables``, its table queues beside it (:func:`kombu_alkstore.tables.route_tables`)."""
    validate_identifier(args.schema, "schema")
    specs = read_tables(getattr(args, "tables", None))
    store = open_store(parse(store_url(args.broker)), schema=args.schema, setup=setup)
    try:
        return route_tables(store, specs)
    except BaseException:
        store.close()
        raise


def read_tables(path: str | None) -> tuple[TableSpec, ...]:
    """The table queues of the JSON file ``path`` (the transport option ``tables``)."""
    if not path:
        return ()
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise CLIError(f"--tables {path}: cannot read a JSON mapping: {exc}") from None
    try:
        return parse_tables(raw)
    except ConfigurationError as exc:
        raise CLIError(f"--tables {path}: {exc}") from None
