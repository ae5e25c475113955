"""The store: queue tables on PostgreSQL or SQLite behind one interface."""

from __future__ import annotations

import os
import threading
from typing import Any

from sqlalchemy.engine import URL

from .base import (
    AMBIENT,
    Delivery,
    Job,
    NewJob,
    QueueCounts,
    ScheduleRow,
    Store,
    SweepResult,
    Waiter,
    Wakeup,
    bound_connection,
)
from .options import StoreOptions, StoreURL, parse_store_url

__all__ = [
    "AMBIENT",
    "Delivery",
    "Job",
    "NewJob",
    "QueueCounts",
    "ScheduleRow",
    "Store",
    "StoreOptions",
    "StoreURL",
    "SweepResult",
    "Waiter",
    "Wakeup",
    "bound_connection",
    "open_store",
    "shared_store",
]

_shared: dict[tuple, Store] = {}
_shared_lock = threading.Lock()


def open_store(url: str | URL | StoreURL, options: StoreOptions | None = None, **kw: Any) -> Store:
    """Open a new store on ``url`` (``postgresql://…`` or ``sqlite:///file.db``).

    ``options`` or keyword options (see :class:`StoreOptions`) configure it; the tables
    are created unless ``setup=False``.
    """
    parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
    opts = options or StoreOptions.from_mapping(kw)
    if parsed.engine == "postgresql":
        from .postgres import PostgresStore

        return PostgresStore(parsed, opts)
    from .sqlite import SQLiteStore

    return SQLiteStore(parsed, opts)


def shared_store(url: str | URL | StoreURL, options: StoreOptions) -> Store:
    """The process-wide store for ``(url, options)``, opened on first use.

    Every kombu connection of a process shares it (and its connection pool); a forked
    child opens its own rather than using its parent's sockets.
    """
    parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
    key = (os.getpid(), parsed.url.render_as_string(hide_password=False), options)
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = _shared[key] = open_store(parsed, options)
        return store
