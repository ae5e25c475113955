"""The PostgreSQL engine (psycopg 3): every psycopg import of the package is in here.

* ``engine.py``: :data:`ENGINE`, how the engine describes itself to the shared store
  code (see ``store/engines.py``); importing this package loads only it.
* ``store.py``: :class:`PostgresStore` (pools, statements, setup, the blocking calls).
* ``queries.sql``: every statement, named (see ``store/sqlfile.py``); ``grants.sql``:
  a runtime role's grants; ``migrations/``: the numbered schema versions.
* ``conninfo.py``: a URL as libpq's connection string, and its check; the one-line
  error for a role without privileges.
* ``floors.py``: the claim floors, where a claim's walk of the claim index starts (no
  psycopg: what the waiter heard and the claims claimed, per process).
* ``session.py``: one connection in libpq pipeline mode, under both of:
* ``claims.py``: the claim session (claims and acks answered from an event loop), and
* ``publisher.py``: publishes confirmed later (``confirm_publish`` off).
* ``waiter.py``: the LISTEN connection (wake-ups, hand-offs); ``handoff.py``: the
  hand-off wire format.
* ``compat.py``: the differences between the supported psycopg releases.

:class:`PostgresStore`, :class:`PostgresWaiter` and :func:`close_all_waiters` are
imported (with psycopg) on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .engine import ENGINE

__all__ = ["ENGINE", "PostgresStore", "PostgresWaiter", "close_all_waiters"]

_LAZY = {
    "PostgresStore": ".store",
    "PostgresWaiter": ".waiter",
    "close_all_waiters": ".waiter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
