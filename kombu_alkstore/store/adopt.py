"""A caller's connection for transactional publish (``bound_connection``), unwrapped.

Shared by the engines: it knows SQLAlchemy's and Django's wrappers by their attributes
and imports no driver.
"""

from __future__ import annotations

from typing import Any


def driver_connection(connection: Any) -> Any:
    """The driver's connection (psycopg, sqlite3) under a SQLAlchemy Connection or
    Session, or under an object with an ``alkstore_connection()`` method (resolved at
    each use)."""
    resolve = getattr(connection, "alkstore_connection", None)
    if callable(resolve):
        connection = resolve()
    get_conn = getattr(connection, "connection", None)  # SQLAlchemy Session → Connection
    if hasattr(connection, "get_bind") and callable(get_conn):
        connection = get_conn()
    dbapi = getattr(connection, "connection", None)  # SQLAlchemy Connection → pool proxy
    if dbapi is not None and hasattr(dbapi, "driver_connection"):
        if not connection.in_transaction():
            # Begin as SQLAlchemy would on a first execute: otherwise its commit() is a
            # no-op and the publish is rolled back when the connection goes back to the pool.
            connection.begin()
        return dbapi.driver_connection
    return connection
