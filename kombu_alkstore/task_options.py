"""What a publish's task says of itself, for the ``before_task_publish`` receivers of
unique tasks and concurrency limits: the task by name, the call's arguments in a message
body, and a task option as the decorator stored it."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any


def task_named(name: str) -> Any:
    """The task named ``name`` in the current app, else in any other live app (the
    signal does not say which app publishes; a task name is one task in practice).

    Only tasks already registered are looked at: ``app.tasks`` would finalize the app,
    early for an app that publishes through another broker, and raises for one made
    with ``autofinalize=False`` (publishing by name from an app not finalized yet, the
    task's defaults are not known, as in a producer that never imports the task)."""
    from celery import current_app
    from celery._state import _get_active_apps

    for app in (current_app, *_get_active_apps()):
        task = getattr(app, "_tasks", None)
        task = task.get(name) if task is not None else None
        if task is not None:
            return task
    return None


def call_args(body: Any) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """``(args, kwargs)`` from a task message body (protocol 2 tuple, or protocol 1 dict)."""
    if isinstance(body, (list, tuple)) and len(body) >= 2:
        return body[0] or (), body[1] or {}
    if isinstance(body, Mapping):
        return body.get("args") or (), body.get("kwargs") or {}
    return (), {}


def task_option(task: Any, name: str) -> Any:
    """Task option ``name`` as stored on the task class (a function given to the
    decorator is not a method: it comes back as the function); None if unset."""
    option = inspect.getattr_static(task, name, None)
    if isinstance(option, (staticmethod, classmethod)):
        option = option.__func__
    return option
