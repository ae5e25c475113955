"""Celery 5.4 to 5.7, one API: what the older lines do differently, worked around here.

- **Why a task was rejected.** Celery 5.7 sends ``task_failure`` for a task that raised
  ``Reject(requeue=False)``; 5.4 to 5.6 do not (the worker only logs it). Every line sends
  ``task_postrun`` with ``state="REJECTED"`` and the ``Reject`` as ``retval`` in the
  process that ran the task: :func:`on_reject` reads the reason there. Under the prefork
  pool on 5.4 to 5.6 that process is the pool's child, not the worker that rejects the
  message, so the reason stays there (the dead letter says "rejected").
- **Several workers in one process** (``celery.contrib.testing.worker.start_worker``, our
  ``thread_worker`` test helper): before 5.7 a worker adopts the kombu event loop an
  earlier worker in the process left as current, with that worker's timer, so its own
  ETA entries (a countdown task, delivered at its ETA) are never fired. Call
  :func:`release_event_loop` after a worker stopped.
- **Task events sent while the worker flushes its event buffer.** Before 5.7 a worker's
  ``EventDispatcher.flush`` publishes its buffered task events and then empties the
  buffer, dropping what a pool thread appended during the publish (5.7 removes only what
  it published). A broker whose publish is a database commit (about a millisecond, ours)
  widens that window enough to lose a quick task's ``task-succeeded`` most of the time
  (Flower and ``celery events`` never see it finish). :func:`keep_events_sent_during_flush`
  gives each worker's app the 5.7 flush.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celery
from celery import signals
from celery.events.dispatcher import EventDispatcher
from celery.exceptions import Reject
from kombu.asynchronous import set_event_loop

REJECTED = "REJECTED"
#: The first line whose worker flushes its task events without losing any.
_FLUSH_FIXED = (5, 7)
_DEFAULT_DISPATCHER = "celery.events.dispatcher:EventDispatcher"


def on_reject(note: Callable[[str, str | None], None]) -> None:
    """Call ``note(task_id, reason)`` when a task run in this process raised
    ``Reject(requeue=False)``, on every supported Celery (idempotent per ``note``)."""

    def _postrun(
        sender: Any = None,
        task_id: str | None = None,
        retval: Any = None,
        state: str | None = None,
        **_: Any,
    ) -> None:
        if state == REJECTED and isinstance(retval, Reject) and not retval.requeue and task_id:
            note(task_id, retval.reason)

    signals.task_postrun.connect(
        _postrun, weak=False, dispatch_uid=f"alkstore-compat-reject-{id(note)}"
    )


def release_event_loop() -> None:
    """Forget kombu's current event loop, so the next worker started in this process
    builds its own (with its own timer) on every supported Celery. Only after the worker
    that used it stopped."""
    set_event_loop(None)


class FlushKeepingDispatcher(EventDispatcher):
    """Celery's event dispatcher whose flush removes from the task buffer only the events
    it published (as Celery 5.7's), so an event a pool thread buffers meanwhile is sent
    by the next flush instead of lost."""

    def flush(self, errors: bool = True, groups: bool = True) -> None:
        super().flush(errors=errors, groups=False)
        if not groups:
            return
        with self.mutex:
            for group, events in self._group_buffer.items():
                if events:
                    batch = list(events)
                    self._publish(batch, self.producer, f"{group}.multi")
                    del events[: len(batch)]


def _give_flush_keeping_dispatcher(sender: Any = None, **_: Any) -> None:
    events = getattr(getattr(sender, "app", None), "events", None)
    if events is None or events.dispatcher_cls != _DEFAULT_DISPATCHER:
        return  # the app chose its own dispatcher: left as it is
    events.dispatcher_cls = FlushKeepingDispatcher
    events.__dict__.pop("Dispatcher", None)  # a cached_property, if read already


def keep_events_sent_during_flush() -> None:
    """Before Celery 5.7: every worker started in this process (``worker_init``) flushes
    its task events with :class:`FlushKeepingDispatcher` (idempotent; nothing on 5.7+)."""
    if tuple(celery.VERSION[:2]) >= _FLUSH_FIXED:
        return
    signals.worker_init.connect(
        _give_flush_keeping_dispatcher, weak=False, dispatch_uid="alkstore-compat-flush"
    )
