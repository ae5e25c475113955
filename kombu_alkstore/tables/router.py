"""The one seam between the transport and table queues: a store that routes.

:func:`route_tables` wraps a connection's store in a :class:`TableRouter` when the
``tables`` option names table queues. The router is the store to the transport (the
claim scheduler, channels, heartbeats, the ack buffer): a claim of a table queue's name
takes due rows of its table first, then the queue's jobs as usual (a Celery retry of a
row's task is such a job); an operation on claims goes to the table for rows
(:class:`~.message.RowDelivery`) and to the store for jobs. Everything else is the
store's. :class:`SessionRouter` does the same for the claims session (PostgreSQL's
pipelined claims): the table's part runs at once, the jobs' part is pipelined.

Guarantees: with no table queue configured nothing is wrapped; a row is never handed to
the store's statements nor a job to a table's; a failure of a row (a rejected task, an
undecodable payload) delays it by the backoff curve until its attempts are spent, then
dead-letters it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..store import Delivery, QueueCounts
from ..store.engines import engine_named
from .message import RowDelivery
from .queue import TableQueue
from .spec import TableSpec

Answer = Callable[[Any], None]


def split(deliveries: Iterable[Delivery]) -> tuple[dict[str, list[RowDelivery]], list[Delivery]]:
    """Rows by queue, and the store's jobs."""
    rows: dict[str, list[RowDelivery]] = {}
    jobs: list[Delivery] = []
    for d in deliveries:
        if isinstance(d, RowDelivery):
            rows.setdefault(d.queue, []).append(d)
        else:
            jobs.append(d)
    return rows, jobs


def open_tables(store: Any, specs: Sequence[TableSpec]) -> dict[str, TableQueue]:
    """Each spec's table queue on ``store``, checked against its table."""
    make = engine_named(store.engine).table_queue
    if make is None:
        raise ConfigurationError(f"the {store.engine} store has no table queues")
    queues = {}
    for spec in specs:
        queue = make(store, spec)
        queue.check()
        queues[spec.queue] = queue
    return queues


class TableRouter:
    """A store (``inner``) with table queues beside its jobs (see the module docstring)."""

    def __init__(self, inner: Any, tables: dict[str, TableQueue]) -> None:
        self.inner = inner
        self.tables = tables

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # ------------------------------------------------------------ claims
    def claim_rows(self, queues: Iterable[str], limit: int) -> list[Delivery]:
        """Up to ``limit`` rows of the table queues among ``queues``."""
        got: list[Delivery] = []
        for name in dict.fromkeys(queues):
            table = self.tables.get(name)
            if table is not None and len(got) < limit:
                got += table.claim(limit - len(got))
        return got

    def claim(self, queues: Sequence[str], limit: int = 1) -> list[Delivery]:
        got = self.claim_rows(queues, limit)
        if len(got) < limit:
            try:
                got += self.inner.claim(queues, limit - len(got))
            except BaseException:
                with contextlib.suppress(Exception):  # else their leases lapse
                    self.release(got)  # not delivered: back at once
                raise
        return got

    def tables_due(self, queues: Iterable[str]) -> bool:
        return any(self.tables[q].has_due() for q in queues if q in self.tables)

    def tables_next(self, queues: Iterable[str]) -> float | None:
        times = [self.tables[q].next_due() for q in queues if q in self.tables]
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def has_due(self, queues: Sequence[str]) -> bool:
        return self.tables_due(queues) or self.inner.has_due(queues)

    def next_due(self, queues: Sequence[str]) -> float | None:
        return earliest(self.tables_next(queues), self.inner.next_due(queues))

    # ------------------------------------------------------------ operations on claims
    def rows_op(self, op: str, rows: dict[str, list[RowDelivery]], *args: Any) -> set[Any]:
        """``TableQueue.<op>`` on each queue's rows; the ids it changed."""
        done: set[Any] = set()
        for name, held in rows.items():
            done |= getattr(self.tables[name], op)(held, *args)
        return done

    def _both(self, deliveries: Iterable[Delivery], op: str, store_op: Callable, *args: Any):
        rows, jobs = split(deliveries)
        done = self.rows_op(op, rows, *args) if rows else set()
        return done | (store_op(jobs) if jobs else set())

    def ack(self, deliveries: Iterable[Delivery]) -> set[Any]:
        return self._both(deliveries, "finish", self.inner.ack)

    def heartbeat(self, deliveries: Iterable[Delivery], extend: float | None = None) -> set[Any]:
        return self._both(
            deliveries, "extend", lambda jobs: self.inner.heartbeat(jobs, extend), extend
        )

    def release(self, deliveries: Iterable[Delivery]) -> set[Any]:
        return self._both(deliveries, "release", self.inner.release)

    def requeue(self, deliveries: Iterable[Delivery]) -> set[Any]:
        """Rows: at once after a first attempt, else the backoff; dead once spent."""
        return self._both(deliveries, "retry", self.inner.requeue, None, True)

    def retry(
        self, deliveries: Iterable[Delivery], delay: float | None = None, *args: Any, **kw: Any
    ) -> set[Any]:
        store_op = lambda jobs: self.inner.retry(jobs, delay, *args, **kw)  # noqa: E731
        return self._both(deliveries, "retry", store_op, delay)

    def fail(self, deliveries: Iterable[Delivery], error: str) -> set[Any]:
        """Rows: a failed attempt (delayed, or dead once spent); jobs: dead letters."""
        return self._both(deliveries, "retry", lambda jobs: self.inner.fail(jobs, error))

    # ------------------------------------------------------------ operator reads
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        """The store's counts with each table queue's rows added to its queue's (every
        table queue listed, even empty, unless ``queues`` leaves it out)."""
        by = {c.queue: c for c in self.inner.counts(queues)}
        for name, table in self.tables.items():
            if queues is None or name in queues:
                by[name] = added(by.get(name), table.counts())
        return sorted(by.values(), key=lambda c: c.queue)

    def session(self) -> Any:
        session = self.inner.session()
        return SessionRouter(session, self) if session is not None else None


def added(jobs: QueueCounts | None, rows: QueueCounts) -> QueueCounts:
    """A queue's job counts and its table's row counts, summed."""
    if jobs is None:
        return rows
    return dataclasses.replace(
        jobs,
        pending=jobs.pending + rows.pending,
        delayed=jobs.delayed + rows.delayed,
        processing=jobs.processing + rows.processing,
        dead=jobs.dead + rows.dead,
    )


def earliest(a: float | None, b: float | None) -> float | None:
    """The earlier of two optional times."""
    return b if a is None else a if b is None else min(a, b)


class SessionRouter:
    """The claims session (``inner``) with the table queues of ``router`` beside it."""

    def __init__(self, inner: Any, router: TableRouter) -> None:
        self.inner = inner
        self.router = router

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def claim(self, queues: Any, limit: int, callback: Callable[[Any, bool], None]) -> None:
        got = self.router.claim_rows(queues, limit)
        if len(got) >= limit:
            callback(got, True)
            return

        def answered(jobs: Any, more: bool) -> None:
            if isinstance(jobs, BaseException):
                with contextlib.suppress(Exception):  # else their leases lapse
                    self.router.release(got)  # not delivered: back at once
                callback(jobs, more)
            else:
                callback(got + list(jobs), more)

        self.inner.claim(queues, limit - len(got), answered)

    def _both(self, op: str, deliveries: Sequence[Delivery], callback: Answer, *args: Any) -> None:
        rows, jobs = split(deliveries)
        done = self.router.rows_op(op, rows, *args) if rows else set()
        if not jobs:
            callback(done)
            return
        store_op = {"finish": "ack", "extend": "heartbeat"}.get(op, op)
        getattr(self.inner, store_op)(
            jobs,
            lambda landed: callback(landed if isinstance(landed, BaseException) else done | landed),
        )

    def ack(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        self._both("finish", deliveries, callback)

    def release(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        self._both("release", deliveries, callback)

    def heartbeat(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        self._both("extend", deliveries, callback)

    def has_due(self, queues: Sequence[str], callback: Answer) -> None:
        if self.router.tables_due(queues):
            callback(True)
        else:
            self.inner.has_due(queues, callback)

    def next_due(self, queues: Sequence[str], callback: Answer) -> None:
        mine = self.router.tables_next(queues)
        self.inner.next_due(
            queues,
            lambda when: callback(
                when if isinstance(when, BaseException) else earliest(mine, when)
            ),
        )


def route_tables(store: Any, specs: Sequence[TableSpec]) -> Any:
    """``store`` with the table queues of ``specs`` (each checked against its table), or
    ``store`` itself when there are none."""
    if not specs:
        return store
    return TableRouter(store, open_tables(store, specs))


def unwrap(store: Any) -> Any:
    """The store under a router (or ``store`` itself)."""
    return store.inner if isinstance(store, TableRouter) else store
