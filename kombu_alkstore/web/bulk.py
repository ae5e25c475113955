"""Requeue or purge dead letters: the selected ones at once, or every one a filter
matches in the background, batch by batch, with progress."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..store import Store
from ..store.acts import Actor
from ..store.admin import DeadFilter

logger = logging.getLogger(__name__)

#: Dead letters moved or deleted per statement by a bulk action.
BULK_BATCH = 2000


@dataclass
class BulkJob:
    """A bulk requeue or purge running in the background, with its progress."""

    id: str
    action: str  # 'requeue' | 'purge'
    where: DeadFilter
    to: str | None
    total: int
    done: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    #: Who started it, and why: each batch is kept as an act per queue (store/acts.py).
    actor: Actor | None = None

    @property
    def percent(self) -> int:
        """How much is done, 0-100 (100 when there was nothing to do)."""
        return 100 if not self.total else min(100, int(self.done * 100 / self.total))


class BulkRunner:
    """Runs bulk actions over every dead letter matching a filter, batch by batch (each
    batch one statement, committed on its own), one action at a time per dashboard."""

    def __init__(self, store: Store, on_progress: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.jobs: dict[str, BulkJob] = {}
        self._lock = threading.Lock()
        self._on_progress = on_progress

    def start(
        self,
        action: str,
        where: DeadFilter,
        to: str | None = None,
        actor: Actor | None = None,
    ) -> BulkJob:
        """Start ``action`` over the dead letters ``where`` matches, in a thread; the job
        is kept in :attr:`jobs` under its id. With ``actor``, each batch writes its acts
        in its own transaction."""
        total = self.store.dead_count(where)
        job = BulkJob(uuid.uuid4().hex[:12], action, where, to, total, actor=actor)
        self.jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return job

    def run(
        self,
        action: str,
        where: DeadFilter,
        to: str | None = None,
        actor: Actor | None = None,
    ) -> BulkJob:
        """The same, in the caller's thread (benchmarks, tests)."""
        total = self.store.dead_count(where)
        job = BulkJob(uuid.uuid4().hex[:12], action, where, to, total, actor=actor)
        self._run(job)
        return job

    def _run(self, job: BulkJob) -> None:
        with self._lock:
            try:
                after = 0
                while True:
                    ids = self.store.dead_ids(job.where, after=after, limit=BULK_BATCH)
                    if not ids:
                        break
                    after = ids[-1]
                    job.done += apply(self.store, job.action, ids, job.to, job.actor)
                    self._on_progress()
            except Exception as exc:
                job.error = f"{type(exc).__name__}: {exc}"
                logger.warning("dashboard: bulk %s stopped: %s", job.action, exc)
            finally:
                job.finished = time.time()
                with contextlib.suppress(Exception):
                    self._on_progress()


def apply(
    store: Store,
    action: str,
    ids: list[int],
    to: str | None = None,
    actor: Actor | None = None,
) -> int:
    """Requeue (to their queue or to ``to``) or purge the dead letters ``ids``; how many
    it moved or deleted. With ``actor``, kept as an act per queue in the same
    transaction (none when nothing changed)."""
    if not ids:
        return 0
    if action == "purge":
        return store.dead_purge(ids=ids, actor=actor)
    if to:
        return store.dead_move(ids, to, actor=actor)
    return store.dead_requeue(ids=ids, actor=actor)
