"""Unique tasks: while a job with a task's unique key is live in its queue, a second
publish with the same key is not enqueued (docs/flow-control.md).

Per call, a publish carries the key in a message header::

    add.apply_async((2, 3), headers={"alkstore_unique": "add:2:3"})
    add.apply_async((2, 3), headers={"alkstore_unique": "add:2:3",
                                     "alkstore_unique_states": ["pending", "delayed"]})

Per task, a default through the task decorator (Celery keeps unknown decorator options
as task attributes; :func:`install`, run when ``kombu_alkstore`` is imported, connects a
``before_task_publish`` receiver that reads them)::

    @app.task(alkstore_unique=True)              # key: the task name and its arguments
    def refresh(user_id): ...

    @app.task(alkstore_unique=lambda args, kwargs: f"report:{kwargs['day']}",
              alkstore_unique_states=("pending", "delayed"))
    def report(day): ...

A header given to ``apply_async`` wins over the task's default (``None`` publishes this
call without a key). A retry (``self.retry()``, headers ``retries`` > 0) is always
enqueued: its key is dropped, since the job it continues still holds it. Malformed values
are passed on to the transport, which refuses the publish naming the option
(:mod:`kombu_alkstore.store.unique`); the receiver itself never raises, because Celery
would only log it.

The second ``apply_async`` still returns an ``AsyncResult`` with the id Celery made for
it; that id never runs. The broker logs one INFO line on the ``kombu_alkstore`` logger
naming the live job and its task id, and :func:`live_task_id` finds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from celery import signals

from .store.unique import KEY_HEADER, MAX_KEY_LENGTH, STATES, STATES_HEADER
from .task_options import call_args, task_named, task_option

__all__ = [
    "KEY_HEADER",
    "STATES",
    "STATES_HEADER",
    "install",
    "key_for",
    "live_task_id",
]

#: The task option giving the default key (True, a string, or a callable).
TASK_OPTION = KEY_HEADER
#: The task option giving the default states.
TASK_STATES_OPTION = STATES_HEADER


def key_for(
    name: str, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None
) -> str:
    """The default unique key of task ``name`` called with ``args``/``kwargs``: the name
    and a SHA-256 of the arguments as canonical JSON (keys sorted; a value JSON cannot
    write is taken by its ``repr``). Equal arguments give equal keys in any process."""
    canonical = json.dumps(
        [list(args or ()), dict(kwargs or {})],
        sort_keys=True,
        separators=(",", ":"),
        default=repr,
    )
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    key = f"{name}:{digest}"
    if len(key) > MAX_KEY_LENGTH:  # a very long task name: hash it too
        key = "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return key


def default_key(task: Any, name: str, body: Any) -> Any:
    """The key task ``task``'s ``alkstore_unique`` option gives for this message body:
    None (no option, False or None), :func:`key_for` (True), the string itself, or what
    a callable ``option(args, kwargs)`` returns. Anything else is returned as it is, to
    be refused by the transport naming the option."""
    option = task_option(task, TASK_OPTION)
    if option is None or option is False:
        return None
    args, kwargs = call_args(body)
    if option is True:
        return key_for(name, args, kwargs)
    if callable(option):
        return option(args, kwargs)
    return option


def _before_publish(
    sender: str | None = None,
    body: Any = None,
    headers: dict[str, Any] | None = None,
    properties: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    """``before_task_publish``: set the unique headers from ``apply_async`` options
    (``alkstore_unique=…`` lands in the message properties) or the task's defaults."""
    if headers is None:
        return
    if properties:
        for option in (KEY_HEADER, STATES_HEADER):
            if option in properties:
                headers.setdefault(option, properties.pop(option))
    if headers.get("retries"):
        # A retry continues the job holding the key: never refused as its duplicate.
        headers.pop(KEY_HEADER, None)
        return
    if KEY_HEADER in headers or not sender:
        return
    task = task_named(sender)
    if task is None:
        return
    try:
        key = default_key(task, sender, body)
    except Exception as exc:  # noqa: BLE001 - Celery would only log it: refuse via the header
        key = {"error": f"the {TASK_OPTION} option of task {sender} raised {exc!r}"}
    if key is None:
        return
    headers[KEY_HEADER] = key
    states = getattr(task, TASK_STATES_OPTION, None)
    if states is not None:
        headers.setdefault(STATES_HEADER, states)


_installed = False


def install() -> None:
    """Connect the ``before_task_publish`` receiver (once; done when ``kombu_alkstore``
    is imported)."""
    global _installed
    if not _installed:
        signals.before_task_publish.connect(_before_publish, weak=False, dispatch_uid=__name__)
        _installed = True


def live_task_id(target: Any, queue: str, key: str) -> str | None:
    """The Celery task id of the live job holding ``key`` in ``queue`` (None: the key is
    free). ``target`` is a :class:`kombu_alkstore.store.Store`, a kombu connection on an
    alkstore broker, or a Celery app (a connection of its broker is opened for the read)."""
    if hasattr(target, "unique_holder"):
        holder = target.unique_holder(queue, key)
        return holder.msg_id if holder is not None else None
    if hasattr(target, "connection_for_write"):  # a Celery app
        with target.connection_for_write() as conn:
            return live_task_id(conn, queue, key)
    target.default_channel  # noqa: B018 - connects: the transport opens its store
    store = getattr(getattr(target, "transport", None), "store", None)
    if store is None:
        raise TypeError(f"{target!r} is not an alkstore store, app or connection")
    return live_task_id(store, queue, key)
