"""Global concurrency limits: at most N jobs of a queue, or of one key within it, claimed
at once across every worker (docs/flow-control.md).

Limits are set on the broker, per queue (``broker_transport_options={"limits": ...}``,
or at run time ``kombu-alkstore queue limit NAME N [--key K]``). A message names its
limit key in a header, per call::

    charge.apply_async((account_id,), headers={"alkstore_limit_key": f"acct:{account_id}"})
    charge.apply_async((account_id,), alkstore_limit_key=f"acct:{account_id}")

or per task, as a default (Celery keeps unknown decorator options as task attributes;
:func:`install` connects a ``before_task_publish`` receiver that reads them)::

    @app.task(alkstore_limit_key="partner-api")                      # one fixed key
    def call_partner(): ...

    @app.task(alkstore_limit_key=lambda args, kwargs: f"tenant:{args[0]}")
    def sync_tenant(tenant_id): ...

A header given to ``apply_async`` wins over the task's default (``None``: no key for this
call). A retry keeps its key: it is the same work and counts against the same limit. A
callable that raises, or a value that is not a string of 1 to 512 characters, publishes
without a key (a key is read by the broker when the job is stored, see
:func:`kombu_alkstore.store.limits.limit_key_of`); the receiver never raises, since
Celery would only log it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from .store.limits import EVERY_KEY, KEY_HEADER, QueueLimit, check_limit, parse_limits
from .task_options import call_args, task_named, task_option

__all__ = ["EVERY_KEY", "KEY_HEADER", "QueueLimit", "check_limit", "install", "parse_limits"]

logger = logging.getLogger("kombu_alkstore")

#: The task option giving the default limit key (a string or a callable).
TASK_OPTION = KEY_HEADER


def default_key(task: Any, body: Any) -> Any:
    """The limit key task ``task``'s ``alkstore_limit_key`` option gives for this message
    body: None (no option), the string itself, or what ``option(args, kwargs)`` returns."""
    option = task_option(task, TASK_OPTION)
    if option is None or option is False:
        return None
    if callable(option):
        args, kwargs = call_args(body)
        return option(args, kwargs)
    return option


def _before_publish(
    sender: str | None = None,
    body: Any = None,
    headers: dict[str, Any] | None = None,
    properties: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    """``before_task_publish``: the limit key header from the ``apply_async`` option
    (``alkstore_limit_key=…`` lands in the message properties) or the task's default."""
    if headers is None:
        return
    if properties and KEY_HEADER in properties:
        headers.setdefault(KEY_HEADER, properties.pop(KEY_HEADER))
    if KEY_HEADER in headers or not sender:
        return
    task = task_named(sender)
    if task is None:
        return
    try:
        key = default_key(task, body)
    except Exception as exc:  # noqa: BLE001 - Celery would only log it
        logger.warning("alkstore: the %s option of task %s raised %r", TASK_OPTION, sender, exc)
        return
    if key is not None:
        headers[KEY_HEADER] = key if isinstance(key, str) else str(key)


_installed = False


def install() -> None:
    """Connect the ``before_task_publish`` receiver (once)."""
    global _installed
    if not _installed:
        signals.before_task_publish.connect(_before_publish, weak=False, dispatch_uid=__name__)
        _installed = True
