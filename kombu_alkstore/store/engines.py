"""The engines, as each engine package describes itself: what shared store code asks
instead of naming an engine or importing its driver.

Each engine package (``store/postgres/``, ``store/sqlite/``) gives one :class:`Engine`
as ``ENGINE`` in its ``engine.py``: its name for display, the URL schemes it serves,
its Store class, its migrations, its printed setup script, its grants and how a URL for
it is checked. :func:`engines` lists them, :func:`engine_named` and
:func:`engine_for_scheme` find one.

Guarantees: a description imports no driver (its hooks do, when called), so listing
the engines or parsing a URL loads no database driver beyond what a hook needs; the
registry is loaded once, on first use, in :data:`PACKAGES` order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from .interface import Store
    from .migrate import Migrations

#: The engine packages, each with an ``ENGINE`` description in its ``engine.py``.
PACKAGES = ("kombu_alkstore.store.postgres", "kombu_alkstore.store.sqlite")


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Engine:
    """One engine, as its package describes it (see the module docstring)."""

    #: The engine's name (``Store.engine``, ``StoreURL.engine``): for display and as a
    #: key, never to branch on.
    name: str
    #: How messages name it (``PostgreSQL``).
    title: str
    #: The SQLAlchemy driver names of the URLs it serves (``postgresql+psycopg``...).
    schemes: frozenset[str]
    #: A URL's start as the "unsupported scheme" error suggests it (``postgresql://…``).
    example: str
    #: The package holding its numbered migrations (``NNNN_<what>.sql``).
    migrations: str
    #: Its :class:`~.interface.Store` class (imports the driver).
    store_class: Callable[[], type[Store]]
    #: ``check_url(parsed, given)``: raise :class:`ConfigurationError` naming what is
    #: wrong in a URL of one of its schemes (``given`` as the caller wrote it).
    check_url: Callable[[URL, Any], None]
    #: ``script(migrations, existing, stored_name)``: the idempotent setup script as
    #: statements (see :func:`.schema.ddl_statements`); ``stored_name(key)`` is a
    #: table's name as stored, ``existing`` the caller's stored tables and columns.
    script: Callable[[Migrations, dict[str, set[str]] | None, Callable[[str], str]], list[str]]
    #: The driver's connection string for a URL (PostgreSQL: libpq's conninfo).
    conninfo: Callable[[URL], str]
    #: Its tables live in a schema of that name (PostgreSQL); otherwise the name is a
    #: prefix of each table's and index's name (SQLite has no schemas).
    schemas: bool = False
    #: The database is a file on this host (``StoreURL.path``): two URLs reach the same
    #: database when they name the same file.
    file: bool = False
    #: ``grants(schema, role)``: the statements granting a runtime role what it needs,
    #: printed after the setup script; None where the engine has no roles.
    grants: Callable[[str, str], str] | None = None
    #: Its consumers keep a connection of their own for wake-ups that the
    #: ``listen_url`` option may point elsewhere (PostgreSQL's LISTEN).
    listen_url: bool = False
    #: Close every connection of this process the engine keeps outside its stores
    #: (``close_all_stores``, between tests).
    close_all: Callable[[], None] = _nothing
    #: ``table_queue(store, spec)``: a table of the service's own on ``store`` read as a
    #: queue (:class:`~kombu_alkstore.tables.queue.TableQueue`, docs/tables.md); None
    #: where the engine has none.
    table_queue: Callable[[Any, Any], Any] | None = None


_registry: tuple[Engine, ...] = ()


def engines() -> tuple[Engine, ...]:
    """Every engine, in :data:`PACKAGES` order."""
    global _registry
    if not _registry:
        _registry = tuple(importlib.import_module(p).ENGINE for p in PACKAGES)
    return _registry


def engine_named(name: str) -> Engine:
    """The engine called ``name`` (``Store.engine``); KeyError for an unknown name."""
    for engine in engines():
        if engine.name == name:
            return engine
    raise KeyError(name)


def engine_for_scheme(scheme: str) -> Engine | None:
    """The engine serving URLs whose driver name is ``scheme``, or None."""
    for engine in engines():
        if scheme in engine.schemes:
            return engine
    return None


def schemes() -> frozenset[str]:
    """Every URL driver name some engine serves (``alkstore+<scheme>`` aliases)."""
    return frozenset().union(*(e.schemes for e in engines()))


def titles(having: Callable[[Engine], Any] = bool) -> str:
    """The titles of the engines for which ``having(engine)`` is true, for a message
    (``PostgreSQL``, ``PostgreSQL or SQLite``)."""
    return " or ".join(e.title for e in engines() if having(e))
