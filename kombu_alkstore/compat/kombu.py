"""kombu 5.3 to 5.7: a declaration retried after a reconnect, given a channel of the
connection that was lost.

A publish with retries (``Producer.publish(retry=True)``, which Celery's ``delay()`` and
``apply_async`` do) declares its exchange and queue first, each through
``Connection.ensure``. On a connection error kombu collects the connection, connects
again, revives the entity onto the new default channel and calls
``kombu.common._maybe_declare(entity, channel)`` again with the channel it was first
given; the publish's own retry calls ``_imaybe_declare`` with the entities bound before
the reconnect. kombu knows such a channel is gone by ``channel.connection`` being None
(what closing a channel sets). Ours keep their transport after it was collected
(``Transport._collect``: a task still running acks late through its channel), whose
``client`` kombu then clears: the retry raised ``AttributeError: 'NoneType' object has
no attribute 'declared_entities'`` (or ``'ensure'``), hiding the error it retried (the
SQLite file locked past ``busy_timeout``, the database lost) and failing a publish a
reconnect had saved. :func:`install` makes both treat a channel of a collected alkstore
transport as gone: the declaration goes to the revived channel, and what the user sees
when the retries run out is the error itself (``kombu.exceptions.OperationalError``
with its text).
"""

from __future__ import annotations

import functools
from typing import Any

import kombu.common as _common

_INSTALLED = "_alkstore_stale_channel"


def stale(channel: Any) -> bool:
    """Whether ``channel`` is one of our channels whose connection kombu collected."""
    transport = getattr(channel, "connection", None)
    return (
        transport is not None
        and getattr(transport, "driver_type", None) == "alkstore"
        and transport.client is None
    )


def install() -> None:
    """Wrap kombu's ``_maybe_declare`` and ``_imaybe_declare`` (idempotent)."""
    maybe = getattr(_common, "_maybe_declare", None)
    imaybe = getattr(_common, "_imaybe_declare", None)
    if maybe is None or imaybe is None or getattr(maybe, _INSTALLED, False):
        return

    @functools.wraps(maybe)
    def _maybe_declare(entity: Any, channel: Any) -> Any:
        if stale(channel) and entity.is_bound and not stale(entity.channel):
            channel = None  # kombu then declares on the entity's (revived) channel
        return maybe(entity, channel)

    @functools.wraps(imaybe)
    def _imaybe_declare(entity: Any, channel: Any, **retry_policy: Any) -> Any:
        if channel is not None and entity.is_bound and stale(entity.channel) and not stale(channel):
            entity.revive(channel)  # bound before the reconnect: onto the new channel
        return imaybe(entity, channel, **retry_policy)

    setattr(_maybe_declare, _INSTALLED, True)
    _common._maybe_declare = _maybe_declare
    _common._imaybe_declare = _imaybe_declare
