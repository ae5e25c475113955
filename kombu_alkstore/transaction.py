"""Transactional publish: a task commits or rolls back with the caller's database write.

::

    import kombu_alkstore

    with psycopg.connect(DSN) as conn:              # the broker's database
        with kombu_alkstore.transaction(conn):
            conn.execute("INSERT INTO orders …")
            send_receipt.delay(order_id)             # an INSERT on ``conn``, not a publish yet
        conn.commit()                                # the order and the task, or neither

Under :func:`transaction`, every kombu/Celery publish made by this thread (or asyncio task:
the binding is a :mod:`contextvars` variable) is written through the caller's connection
instead of the broker's own, and the store commits nothing: the messages become visible
to workers when the caller commits (PostgreSQL delivers the wake-up NOTIFY at commit;
SQLite workers see the commit through ``PRAGMA data_version``) and vanish on rollback,
including a rollback to a savepoint taken after them.

Accepted connections: a psycopg 3 ``Connection``, a SQLAlchemy ``Connection``, ``Session``
or ``scoped_session`` (sync), an ``sqlite3.Connection``, and any object with an
``alkstore_connection()`` method returning one of those (resolved at each use; this is how
:mod:`kombu_alkstore.django` binds Django's connection).

Nothing falls back to the broker's own connection: at the first publish the store checks
that the connection reaches the broker's database (and, on PostgreSQL, the broker's
schema on the same server) and that a transaction is open or will open implicitly; if not
it raises :class:`~kombu_alkstore.errors.ConfigurationError` naming both sides, and nothing
is published.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import ContextDecorator
from typing import Any, TypeVar

from .errors import ConfigurationError
from .store.ambient import AMBIENT

__all__ = ["current", "transaction"]

F = TypeVar("F", bound=Callable[..., Any])


def current() -> Any:
    """The connection publishes of this context go through, or None (the broker's own)."""
    return AMBIENT.get()


class transaction(ContextDecorator):  # noqa: N801  (used like a function: transaction(conn))
    """Publish through ``connection``'s open transaction for the duration of a block.

    A context manager (``with transaction(conn): …``), also a decorator
    (``@transaction(conn)``, for sync and ``async`` functions). The binding is per
    thread and per asyncio task; nested blocks stack (the innermost connection wins and
    the outer one is restored on exit). Entering does not begin, commit or roll back
    anything: the caller owns the transaction.
    """

    def __init__(self, connection: Any) -> None:
        _check_kind(connection)
        self.connection = connection
        self._tokens: list[Any] = []

    def __enter__(self) -> Any:
        self._tokens.append(AMBIENT.set(self.connection))
        return self.connection

    def __exit__(self, *exc: object) -> None:
        AMBIENT.reset(self._tokens.pop())

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)

    def _recreate_cm(self) -> transaction:
        # A decorated function may run in several threads at once: one binding per call.
        return type(self)(self.connection)

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def inner(*args: Any, **kwargs: Any) -> Any:
                async with self._recreate_cm():
                    return await func(*args, **kwargs)

            return inner  # type: ignore[return-value]
        return super().__call__(func)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<kombu_alkstore.transaction({type(self.connection).__name__})>"


def _check_kind(connection: Any) -> None:
    """Refuse, up front, what can never carry a transactional publish."""
    if connection is None:
        raise ConfigurationError(
            "transaction() needs an open connection (psycopg, SQLAlchemy Connection or "
            "Session, sqlite3), got None"
        )
    kind = type(connection)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if name.startswith("sqlalchemy.ext.asyncio.") or inspect.iscoroutinefunction(
        getattr(connection, "execute", None)
    ):
        raise ConfigurationError(
            f"transaction(): {kind.__name__} is an asyncio connection; the store publishes "
            "with blocking calls, so bind a sync connection (psycopg.Connection, a "
            "SQLAlchemy Connection or Session on a sync engine, sqlite3)"
        )
    if name.startswith("sqlalchemy.") and kind.__name__ in ("Engine", "OptionEngine"):
        raise ConfigurationError(
            "transaction(): got a SQLAlchemy Engine; bind the Connection or Session whose "
            "transaction the tasks should join (e.g. `with engine.begin() as conn, "
            "kombu_alkstore.transaction(conn): …`)"
        )
    if name.startswith("sqlalchemy.orm.") and kind.__name__ == "sessionmaker":
        raise ConfigurationError(
            "transaction(): got a sessionmaker; bind the Session whose transaction the tasks "
            "should join (a sessionmaker would make a new session nobody commits)"
        )
    if name.startswith("psycopg_pool."):
        raise ConfigurationError(
            "transaction(): got a connection pool; bind the connection taken from it "
            "(`with pool.connection() as conn, kombu_alkstore.transaction(conn): …`)"
        )
