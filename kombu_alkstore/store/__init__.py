"""The store: queue tables on PostgreSQL or SQLite behind one interface."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from sqlalchemy.engine import URL

from ..errors import StoreUnavailable
from .acts import Act, ActFilter, Actor
from .ambient import AMBIENT, bound_connection, unbound
from .claims import ClaimSession
from .engines import engines
from .generations import ROTATION_CAP, ROTATION_SMALL, Rotation
from .interface import Store
from .options import StoreOptions, StoreURL, parse_store_url
from .schedules import ScheduleRow
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
from .waiter import Waiter, Wakeup

__all__ = [
    "AMBIENT",
    "MAINTENANCE_JOBS",
    "Act",
    "ActFilter",
    "Actor",
    "Capabilities",
    "ClaimSession",
    "Delivery",
    "Job",
    "MaintenanceResult",
    "NewJob",
    "QueueCounts",
    "ROTATION_CAP",
    "ROTATION_SMALL",
    "Rotation",
    "ScheduleRow",
    "Store",
    "StoreOptions",
    "StoreURL",
    "SweepResult",
    "Waiter",
    "Wakeup",
    "bound_connection",
    "acquire_store",
    "connection_errors",
    "database_errors",
    "open_store",
    "release_store",
    "shared_store",
    "unbound",
]

_shared: dict[tuple, list] = {}  # key -> [store, references]
_opened: weakref.WeakSet[Store] = weakref.WeakSet()
_shared_lock = threading.Lock()


def open_store(url: str | URL | StoreURL, options: StoreOptions | None = None, **kw: Any) -> Store:
    """Open a new store on ``url`` (``postgresql://…`` or ``sqlite:///file.db``).

    ``options`` or keyword options (see :class:`StoreOptions`) configure it; the tables
    are created unless ``setup=False``.
    """
    parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
    opts = options or StoreOptions.from_mapping(kw)
    store_class = parsed.description.store_class()
    with unbound():  # setup never joins a caller's transaction
        store = store_class(parsed, opts)
    _opened.add(store)
    return store


def _engine_errors(attr: str) -> tuple[type[BaseException], ...]:
    found: dict[type[BaseException], None] = {StoreUnavailable: None}
    for engine in engines():
        found.update(dict.fromkeys(getattr(engine.store_class(), attr)))
    return tuple(found)


def connection_errors() -> tuple[type[BaseException], ...]:
    """Every engine's exceptions that mean a lost or unreachable database (for kombu's
    class-level ``Transport.connection_errors``, known before any store is open)."""
    return _engine_errors("connection_errors")


def database_errors() -> tuple[type[BaseException], ...]:
    """Every engine's exceptions for a failed statement (connection errors included)."""
    return _engine_errors("database_errors")


def close_all_stores() -> int:
    """Close every store (and wake-up connection) this process opened and forget the
    shared ones. For test suites, between tests; returns how many stores were open."""
    with _shared_lock:
        _shared.clear()
    stores = list(_opened)
    for store in stores:
        store.close()
    _opened.clear()
    for engine in engines():
        engine.close_all()
    return len(stores)


def acquire_store(url: str | URL | StoreURL, options: StoreOptions) -> Store:
    """The process-wide store for ``(url, options)``, opened on first use.

    Every kombu connection of a process shares it (and its connection pool); a forked
    child opens its own rather than using its parent's sockets. Each acquire is paired
    with :func:`release_store`; the last release closes the store.
    """
    parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
    key = (os.getpid(), parsed.url.render_as_string(hide_password=False), options)
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None:
            entry = _shared[key] = [open_store(parsed, options), 0]
        entry[1] += 1
        return entry[0]


def release_store(store: Store) -> None:
    """Drop one reference taken by :func:`acquire_store`; close the store at the last."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is store:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _shared[key]
                    store.close()
                return


def shared_store(url: str | URL | StoreURL, options: StoreOptions) -> Store:
    """Like :func:`acquire_store`, for a holder that keeps it for the process's life."""
    return acquire_store(url, options)
