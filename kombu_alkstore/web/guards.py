"""The dashboard's guard-rails: whether a queue is known, which dead letters a requeue will
not fix (their task is not registered by any worker), and a filter as words for the audit
log. Pure reads: nothing here changes the store."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..store import Store
from ..store.admin import DeadFilter

#: What the worker writes as a dead letter's error for a task it does not know
#: (``kombu_alkstore.transport.reasons``).
UNREGISTERED_ERROR = "unregistered task"
#: Task names a warning lists at most (then ``…``).
LISTED_TASKS = 5


def queue_known(store: Store, name: str, snapshot_names: Iterable[str] = ()) -> bool:
    """True when ``name`` is a queue the store knows: in the last snapshot (messages, dead
    letters, paused), declared by a worker or publisher, paused, or holding anything now."""
    return name in set(snapshot_names) or store.knows_queue(name)


def unregistered_tasks(items: list[dict[str, Any]], registered: set[str] | None) -> list[str]:
    """The task names among the described dead letters ``items`` (see
    :func:`.messages.describe`) that requeueing will not fix, sorted: those no worker has
    registered when ``registered`` is known (the workers' ``inspect registered``), else
    those whose last error says the worker did not know the task."""
    names = set()
    for m in items:
        task = m["task"]
        if registered is not None:
            if task and task not in registered:
                names.add(task)
        elif UNREGISTERED_ERROR in (m["job"].last_error or ""):
            names.add(task or "?")
    return sorted(names)


def unregistered_warning(tasks: list[str], registered_known: bool) -> str | None:
    """The one-line warning for dead letters of the ``tasks`` requeueing will not fix
    (None when there are none)."""
    if not tasks:
        return None
    listed = ", ".join(tasks[:LISTED_TASKS]) + (", …" if len(tasks) > LISTED_TASKS else "")
    why = (
        "no running worker has registered"
        if registered_known
        else "the worker did not know (their error says unregistered task)"
    )
    return (
        f"Some of these dead letters are of tasks {why}: {listed}. Requeueing will not "
        "fix them: deploy a worker that defines the task first."
    )


def describe_filter(where: DeadFilter) -> str:
    """A dead-letter filter in words, for the audit log: ``queue 'q', task 't', error
    containing 'x', died from 2026-11-30 12:00:00 until …`` (local time), or ``every dead
    letter`` for an empty filter. Values are quoted with ``repr`` so a log line stays one
    line."""
    parts = []
    if where.queue:
        parts.append(f"queue {where.queue!r}")
    if where.task:
        parts.append(f"task {where.task!r}")
    if where.error:
        parts.append(f"error containing {where.error!r}")
    until = "until" if where.since is not None else "died until"
    for word, value in (("died from", where.since), (until, where.until)):
        if value is not None:
            parts.append(f"{word} {datetime.fromtimestamp(value).strftime('%Y-%m-%d %H:%M:%S')}")
    return ", ".join(parts) if parts else "every dead letter"
