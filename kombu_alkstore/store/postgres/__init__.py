"""The PostgreSQL engine (psycopg 3): every psycopg import of the package is in here.

* ``store.py``: :class:`PostgresStore` (pools, statements, setup, the blocking calls).
* ``queries.sql``: every statement, named (see ``store/sqlfile.py``).
* ``session.py``: one connection in libpq pipeline mode, under both of:
* ``claims.py``: the claim session (claims and acks answered from an event loop), and
* ``publisher.py``: publishes confirmed later (``confirm_publish`` off).
* ``waiter.py``: the LISTEN connection (wake-ups, hand-offs); ``handoff.py``: the
  hand-off wire format.
"""

from .store import PostgresStore
from .waiter import PostgresWaiter, close_all_waiters

__all__ = ["PostgresStore", "PostgresWaiter", "close_all_waiters"]
