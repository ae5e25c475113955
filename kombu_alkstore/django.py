"""Transactional publish for Django: tasks commit or roll back with ``transaction.atomic``.

::

    from django.db import transaction
    import kombu_alkstore.django

    with transaction.atomic(), kombu_alkstore.django.transaction():
        order = Order.objects.create(...)
        send_receipt.delay(order.pk)      # visible to workers when the atomic block commits

    # the same, in one:
    with kombu_alkstore.django.atomic():
        ...

    @kombu_alkstore.django.atomic()       # both are decorators too
    def create_order(request): ...

Publishes go through Django's own database connection (``django.db.connections[using]``,
psycopg 3 or sqlite3 underneath), resolved at each publish, so they join whatever atomic
block (or savepoint) is open at that moment. A publish made under :func:`transaction`
but outside any ``atomic`` block raises :class:`~kombu_alkstore.errors.ConfigurationError`
instead of committing on its own: Django runs in autocommit mode there, so the message
could not commit or roll back with anything. The database must be the broker's (same
PostgreSQL database, or same SQLite file), checked at the first publish.

Requires the ``django`` extra (``pip install kombu-alkstore[django]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db import transaction as django_transaction

from .errors import ConfigurationError
from .store.engines import engine_for_scheme
from .transaction import transaction as _bind

__all__ = ["DjangoConnection", "atomic", "transaction"]


class DjangoConnection:
    """Django's connection ``using``, resolved at each publish (the store calls
    :meth:`alkstore_connection`): each thread or async context gets its own."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or DEFAULT_DB_ALIAS

    def alkstore_connection(self) -> Any:
        conn = connections[self.using]
        if not conn.in_atomic_block:
            raise ConfigurationError(
                "kombu_alkstore.django.transaction(): a task was published outside "
                f"transaction.atomic() on database {self.using!r}; Django autocommits there, "
                "so the message could not commit or roll back with your writes. Wrap the "
                "block in transaction.atomic() (or use kombu_alkstore.django.atomic())"
            )
        if engine_for_scheme(conn.vendor) is None:  # Django's vendor names our schemes
            raise ConfigurationError(
                f"kombu_alkstore.django.transaction(): database {self.using!r} is "
                f"{conn.vendor}; the alkstore broker runs on PostgreSQL or SQLite"
            )
        conn.ensure_connection()
        raw = conn.connection
        if type(raw).__module__.startswith("psycopg2"):
            raise ConfigurationError(
                f"kombu_alkstore.django.transaction(): database {self.using!r} uses psycopg2; "
                "transactional publish needs psycopg 3 (pip install 'psycopg[binary]')"
            )
        return raw

    def __repr__(self) -> str:
        return f"<Django connection {self.using!r}>"


def transaction(using: str | None = None) -> _bind:
    """Publish through Django's connection ``using`` (default database) for a block.

    A context manager and a decorator; it opens no transaction itself: use it inside
    ``transaction.atomic(using)`` (publishing outside one raises), or use :func:`atomic`.
    """
    return _bind(DjangoConnection(using))


@contextmanager
def atomic(
    using: str | None = None, savepoint: bool = True, durable: bool = False
) -> Iterator[None]:
    """``django.db.transaction.atomic(using, savepoint, durable)`` with :func:`transaction`
    bound inside it: a context manager and a decorator."""
    with (
        django_transaction.atomic(using, savepoint=savepoint, durable=durable),
        _bind(DjangoConnection(using)),
    ):
        yield
