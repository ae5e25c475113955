"""Celery's result consumer (``BaseResultConsumer``) on the process's :class:`Watcher`.

``AsyncResult.get()``, ``ResultSet.get()``/``join_native()`` and ``iter_native`` go
through Celery's ``AsyncBackendMixin`` to this consumer: ``consume_from`` registers the
task's key with the watcher (no statement), ``drain_events`` takes part in the watcher's
rounds, and each value the watcher reads is decoded here and handed to Celery's
``on_state_change`` (which fulfils the waiting results). A result that became ready is
no longer watched.
"""

from __future__ import annotations

import os
from typing import Any

from celery import states
from celery.backends.asynchronous import BaseResultConsumer

from .watcher import Watcher


class ResultConsumer(BaseResultConsumer):
    """One backend's (so one thread's) consumer; the watching itself is shared."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watching: dict[str, str] = {}  # task id -> key
        self._pid = os.getpid()

    @property
    def watcher(self) -> Watcher:
        return self.backend.watcher

    def start(self, initial_task_id: str, **kwargs: Any) -> None:
        self.consume_from(initial_task_id)

    def stop(self) -> None:
        for task_id in list(self._watching):
            self.cancel_for(task_id)

    def on_after_fork(self) -> None:
        # The parent's watcher and listener are the parent's: a child starts clean.
        self._watching.clear()

    def consume_from(self, task_id: str) -> None:
        if self._pid != os.getpid():  # a forked child: its parent's ids are not watched here
            self._pid = os.getpid()
            self._watching.clear()
        if task_id in self._watching:
            return
        key = self.backend._key(task_id)
        self._watching[task_id] = key
        self.watcher.watch(task_id, key, self)

    def cancel_for(self, task_id: str) -> None:
        key = self._watching.pop(task_id, None)
        if key is not None:
            self.watcher.unwatch(task_id, key, self)

    def on_wait_for_pending(self, result: Any, **kwargs: Any) -> None:
        """Nothing to read here: the watcher's next round reads every newly watched
        key in one statement (Redis's consumer reads each waiter's meta itself)."""

    def drain_events(self, timeout: float | None = None) -> None:
        self.watcher.drain(timeout)

    def on_value(self, key: str, value: bytes, every_state: bool) -> bool:
        """The watcher read ``value`` for ``key``: hand a ready state (or, with
        ``every_state``, any state) to Celery; True when it was ready."""
        meta = self.backend.decode_result(value)
        ready = meta.get("status") in states.READY_STATES
        if ready or every_state:
            self.on_state_change(meta, None)
        return ready

    def on_state_change(self, meta: dict[str, Any], message: Any) -> None:
        super().on_state_change(meta, message)
        if meta.get("status") in states.READY_STATES:
            self.cancel_for(meta["task_id"])
