"""Why Celery rejected a message, kept with its dead letter.

kombu's ``reject`` carries no reason, but Celery knows it: a task that raised
``Reject("…", requeue=False)`` (Celery sends ``task_failure`` with the exception just
before it rejects), a task name the worker does not know (``task_unknown``, sent just
after), or a message it cannot read as a task (``task_rejected``). These receivers keep
that reason as the dead letter's ``last_error`` instead of a bare "rejected".
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from celery import signals
from celery.exceptions import Reject

from ..compat import celery as compat_celery

logger = logging.getLogger("kombu_alkstore")
#: Reasons noted and not yet used, by task id (bounded: a reject may never come).
_pending: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()
_MAX_PENDING = 10_000
GENERIC = "rejected"


def take(task_id: str | None) -> str:
    """The reason noted for ``task_id`` (forgotten once taken), or ``"rejected"``."""
    if task_id is None:
        return GENERIC
    with _lock:
        return _pending.pop(task_id, GENERIC)


def _note(task_id: str, reason: str) -> None:
    with _lock:
        _pending[task_id] = reason
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)


def _on_failure(sender: Any = None, task_id: str | None = None, exception: Any = None, **_: Any):
    if isinstance(exception, Reject) and not exception.requeue and task_id:
        _note_reject(task_id, exception.reason)


def _note_reject(task_id: str, why: Any) -> None:
    _note(task_id, f"rejected: {why}" if why not in (None, "") else GENERIC)


def _explain_after(sender: Any, message: Any, reason: str) -> None:
    """The message was rejected already: reword its dead letter."""
    store = getattr(getattr(getattr(sender, "connection", None), "transport", None), "store", None)
    task_id = (getattr(message, "headers", None) or {}).get("id")
    if store is None or not hasattr(store, "dead_explain") or not task_id:
        return
    try:
        store.dead_explain(str(task_id), reason)
    except Exception as exc:  # the dead letter keeps "rejected"
        logger.debug("alkstore: could not record why %s was rejected: %r", task_id, exc)


def _on_unknown(sender: Any = None, message: Any = None, name: str | None = None, **_: Any):
    _explain_after(sender, message, f"rejected: unregistered task {name!r}")


def _on_rejected(sender: Any = None, message: Any = None, exc: Any = None, **_: Any):
    what = f"invalid task message: {exc!r}" if exc is not None else "unknown message type"
    _explain_after(sender, message, f"rejected: {what}")


def install() -> None:
    """Connect the receivers (idempotent)."""
    signals.task_failure.connect(_on_failure, weak=False, dispatch_uid="alkstore-reasons-f")
    # Celery before 5.7 sends no task_failure for a Reject: task_postrun tells it there.
    compat_celery.on_reject(_note_reject)
    signals.task_unknown.connect(_on_unknown, weak=False, dispatch_uid="alkstore-reasons-u")
    signals.task_rejected.connect(_on_rejected, weak=False, dispatch_uid="alkstore-reasons-r")
