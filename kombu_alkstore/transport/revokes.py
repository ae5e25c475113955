"""Durable revoke: Celery's revokes recorded by the broker, honoured after any restart.

Celery revokes a task by a broadcast to the workers' pidbox queues; each worker keeps the
id in memory (or in its ``--statedb`` file). A broker that holds ETA tasks for days must
do better: a task due tomorrow, revoked today, must not run tomorrow because the workers
restarted in between. So:

* the revoke broadcast passes through this transport's publish, which also records the
  revoke on the task's jobs still in the store (:meth:`Store.revoke`), in the broadcast's
  own commit;
* a claim returns such a job marked ``revoked``, and the transport adds its id to the
  Celery worker's revoked list before delivering it: Celery discards it as revoked and
  reports ``REVOKED`` to the result backend, as it does for a revoke it heard itself;
* when a consumer blocks while taking messages (the solo pool runs the task right there,
  gevent and eventlet too until it yields), the rest of the batch is checked again once
  what the claim read is over half a second old, so a revoke that came meanwhile is not
  overtaken. A quick consumer (prefork, threads) never waits that long in one batch, so
  it pays no extra read.

``terminate=True`` keeps Celery's meaning: the broadcast still reaches the workers.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import sys
import time
from collections import deque

from kombu.serialization import loads

from ..store import Delivery, Store

logger = logging.getLogger("kombu_alkstore")
#: Seconds after which what a claim read of its jobs' revokes is checked again (only a
#: consumer that runs tasks as it takes them, an inline pool, takes that long).
STALE_AFTER = 0.5
#: The pidbox exchanges Celery's remote control broadcasts to end with this.
PIDBOX_SUFFIX = ".pidbox"


def revoked_task_ids(exchange: str, message: dict) -> list[str]:
    """The task ids a Celery ``revoke`` broadcast names, or [] for any other message."""
    if not exchange.endswith(PIDBOX_SUFFIX):
        return []
    try:
        body = message.get("body")
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        # Any serializer, even one kombu disables for reading (pickle): this process wrote
        # the message itself (its own broadcast, on its way out) with the app's
        # task_serializer, which Celery uses for control messages too.
        command = loads(
            body,
            message.get("content-type") or "application/json",
            message.get("content-encoding") or "utf-8",
            accept=None,
            force=True,
        )
    except Exception as exc:  # not a control message we can read: nothing to record
        logger.debug("alkstore: a broadcast on %r not read for revokes: %r", exchange, exc)
        return []
    if not isinstance(command, dict) or command.get("method") != "revoke":
        return []
    ids = (command.get("arguments") or {}).get("task_id")
    if isinstance(ids, str):
        ids = [ids]
    return [str(i) for i in ids or () if i]


def tell_worker(task_id: str | None) -> None:
    """Add ``task_id`` to this Celery worker's revoked list (no-op outside a worker)."""
    state = sys.modules.get("celery.worker.state")
    if state is not None and task_id:
        state.revoked.add(task_id)


def recheck_if_stale(store: Store, read_at: float, pending: deque[Delivery]) -> float:
    """Mark the ``pending`` deliveries whose task was revoked since ``read_at`` (when their
    revoke marks were read), if that is over :data:`STALE_AFTER` ago: one read. Returns
    when the marks were last read."""
    now = time.monotonic()
    if not pending or now - read_at < STALE_AFTER:
        return read_at
    try:
        marked = store.revoked_among([d.id for d in pending])
    except Exception as exc:  # the claims and ids stand; the workers' own list still applies
        logger.warning("alkstore: could not check revokes: %r", exc)
        return now
    if marked:
        for i, d in enumerate(pending):
            if d.id in marked:
                pending[i] = dataclasses.replace(d, revoked=True)
    return now


def record(store: Store, exchange: str, message: dict) -> None:
    """Record a revoke broadcast on the jobs it names (see the module docstring)."""
    ids = revoked_task_ids(exchange, message)
    if ids:
        marked = store.revoke(ids)
        logger.debug("alkstore: revoke of %s recorded on %d job(s)", ids, marked)
