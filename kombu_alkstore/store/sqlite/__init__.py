"""The SQLite engine (the standard library's sqlite3): every sqlite3 import of the
package is in here.

* ``engine.py``: :data:`ENGINE`, how the engine describes itself to the shared store
  code (see ``store/engines.py``); importing this package loads only it.
* ``store.py``: :class:`SQLiteStore` (one connection per process, write transactions
  under ``BEGIN IMMEDIATE``, the maintenance jobs).
* ``queries.sql``: every statement, named (see ``store/sqlfile.py``); ``migrations/``:
  the numbered schema versions; ``script.py``: the printed setup script.
* ``connection.py``: how connections are opened; rows by column name.
* ``waiter.py``: :class:`SQLiteWaiter`, wake-ups by polling ``PRAGMA data_version``.

It has none of the optional capabilities (see ``values.Capabilities``): no listener, no
hand-off, no claim session, no pipelined publish, and declarations join a caller's
transaction. :class:`SQLiteStore` and :class:`SQLiteWaiter` are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .engine import ENGINE

__all__ = ["ENGINE", "SQLiteStore", "SQLiteWaiter"]

_LAZY = {"SQLiteStore": ".store", "SQLiteWaiter": ".waiter"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
