"""The result backend's interface to an engine (``Store.results()``).

:mod:`kombu_alkstore.results` (the Celery result backend) speaks only to these two
classes; each engine implements them in ``store/<engine>/results.py`` with its statements
in ``store/<engine>/results.sql`` (tables of migration 0004). Nothing outside the engine
packages knows which engine it talks to.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

#: What :meth:`ResultListener.wait` returns when it cannot say which results changed
#: (SQLite's change check, or a reconnected listener that may have missed some): read
#: every watched result.
ANY = "*"

#: Header index of a chord part whose index Celery did not give (sorted last).
NO_INDEX = 2**62


@dataclass(frozen=True)
class Cleanup:
    """What one :meth:`ResultStore.cleanup` deleted."""

    results: int = 0
    chords: int = 0
    parts: int = 0


class ResultListener(abc.ABC):
    """One process's source of "these results changed" events (PostgreSQL: a LISTEN
    connection; SQLite: ``PRAGMA data_version`` on a connection of its own). Not
    thread-safe: one thread waits on it at a time (see ``results/watcher.py``)."""

    @abc.abstractmethod
    def wait(
        self, timeout: float, interrupted: Callable[[], bool]
    ) -> dict[str, bytes | None] | str:
        """Block up to ``timeout`` s, or until ``interrupted()`` turns true (checked at
        least every few milliseconds, or woken by :meth:`interrupt`); the task ids whose
        result changed, each with its new value when the notification carried it (None:
        read it), or :data:`ANY`."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Wake a :meth:`wait` in progress (from any thread)."""

    @abc.abstractmethod
    def close(self) -> None: ...


class ResultStore(abc.ABC):
    """Results, groups and chord counters in the store's database. Thread-safe.

    Keys are Celery's (``celery-task-meta-<id>``), values the encoded bytes Celery's
    serializer made; ``expires_at`` is absolute epoch seconds (None: never). Reads never
    return an expired value, whether or not :meth:`cleanup` has deleted it yet.
    """

    #: The driver's exceptions for a lost database (Celery retries on them).
    connection_errors: tuple[type[BaseException], ...] = ()
    #: Statements run since the store was made, by kind (read by tests and benchmarks).
    statements: dict[str, int]

    @abc.abstractmethod
    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The unexpired values of ``keys``, in one statement (per 1,000 keys)."""

    @abc.abstractmethod
    def put(
        self,
        key: str,
        value: bytes,
        state: str | None,
        task_id: str | None,
        expires_at: float | None,
        keep_success: bool = False,
    ) -> None:
        """Store ``value`` under ``key`` (in one statement); with ``task_id``, tell
        listeners at commit. With ``keep_success`` an unexpired SUCCESS stays as it is."""

    @abc.abstractmethod
    def delete(self, keys: Sequence[str]) -> None: ...

    @abc.abstractmethod
    def expire(self, key: str, expires_at: float | None) -> None: ...

    #: Rows one cleanup statement deletes at most (the store's ``maintenance_batch``).
    cleanup_batch: int = 10_000

    def cleanup(self) -> Cleanup:
        """Delete every expired result and chord (and the parts of those chords), in
        statements of at most :attr:`cleanup_batch` results and as many chords each, so
        that a large backlog never makes one statement run into ``statement_timeout``."""
        results = chords = parts = 0
        while True:
            done = self._cleanup_batch(self.cleanup_batch)
            results, chords, parts = (
                results + done.results,
                chords + done.chords,
                parts + done.parts,
            )
            if done.results < self.cleanup_batch and done.chords < self.cleanup_batch:
                return Cleanup(results, chords, parts)

    @abc.abstractmethod
    def _cleanup_batch(self, batch: int) -> Cleanup:
        """Delete up to ``batch`` expired results and ``batch`` expired chords with
        their parts."""

    @abc.abstractmethod
    def chord_size(self, group_id: str, size: int, expires_at: float | None) -> None:
        """Chord ``group_id`` completes once ``size`` (plus any added) parts are recorded;
        parts recorded before this call count (a fast header task may return first)."""

    @abc.abstractmethod
    def chord_add(self, group_id: str, count: int, expires_at: float | None) -> None:
        """``count`` more header results to wait for (Celery's ``add_to_chord``)."""

    @abc.abstractmethod
    def chord_part(
        self,
        group_id: str,
        task_id: str,
        index: int,
        value: bytes,
        bind: bool,
        expires_at: float | None,
    ) -> AbstractContextManager[list[bytes] | None]:
        """A transaction recording one header result and counting it.

        Yields None when the part was recorded before (a redelivered header task), the
        chord fired already, or parts are still to come; yields every part's value
        (header order) to the one caller whose part completed the chord, which is then
        marked fired. What that caller does in the block (the callback's publish, with
        ``bind``: through this transaction's connection, so a broker on the same database
        commits it with the count) commits with it; an exception rolls everything back.
        """

    @abc.abstractmethod
    def chord_state(self, group_id: str) -> tuple[int | None, int, int, bool] | None:
        """``(size, extra, done, fired)`` of a chord, or None."""

    @abc.abstractmethod
    def by_task(self, task_id: str) -> list[dict[str, Any]]:
        """The rows stored for ``task_id`` (``key, state, value, stored_at, expires_at``),
        newest first, expired ones included: for display (the dashboard)."""

    @abc.abstractmethod
    def listener(self) -> ResultListener:
        """A new listener (the watcher keeps one per process)."""


def chunks(items: Sequence[str], size: int = 1000) -> Iterator[Sequence[str]]:
    """``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
