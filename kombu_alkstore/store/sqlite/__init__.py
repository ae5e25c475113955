"""The SQLite engine (the standard library's sqlite3): every sqlite3 import of the
package is in here.

* ``store.py``: :class:`SQLiteStore` (one connection per process, write transactions
  under ``BEGIN IMMEDIATE``, the maintenance jobs).
* ``queries.sql``: every statement, named (see ``store/sqlfile.py``).
* ``connection.py``: how connections are opened; rows by column name.
* ``waiter.py``: :class:`SQLiteWaiter`, wake-ups by polling ``PRAGMA data_version``.

It has none of the optional capabilities (see ``base.Capabilities``): no listener, no
hand-off, no claim session, no pipelined publish, and declarations join a caller's
transaction.
"""

from .store import SQLiteStore
from .waiter import SQLiteWaiter

__all__ = ["SQLiteStore", "SQLiteWaiter"]
