"""Which connection a store call of this context uses: the store's own, or a caller's
open one (transactional publish, see :mod:`kombu_alkstore.transaction`).

The binding is a context variable, so it holds for one thread or asyncio task only and
is undone when its ``with`` block ends, whatever happens inside.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The caller's open connection for transactional publish (see ``bound_connection``).
AMBIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("alkstore_ambient", default=None)


@contextmanager
def unbound() -> Iterator[None]:
    """Run store calls on the store's own connections even inside ``bound_connection``:
    for work that must not commit or roll back with the caller (setup, routing reads,
    declarations on PostgreSQL)."""
    token = AMBIENT.set(None)
    try:
        yield
    finally:
        AMBIENT.reset(token)


@contextmanager
def bound_connection(connection: Any) -> Iterator[None]:
    """Route every store write of this context (thread or asyncio task) through the
    caller's open ``connection``: nothing is committed by the store, so the jobs commit or
    roll back with the caller's transaction. Each store checks at first use that the
    connection reaches its database and schema."""
    token = AMBIENT.set(connection)
    try:
        yield
    finally:
        AMBIENT.reset(token)
