"""Publishes sent without waiting for their commit (``confirm_publish`` off).

A publish normally costs one round trip: ``apply_async`` returns once the row is
committed. With ``confirm_publish`` off, each publish is written to a dedicated
connection in libpq pipeline mode (a :class:`.session.PipelineSession`) and the call
returns at once; the server's answers are read later (at the next publish, at
:meth:`PipelinedPublisher.flush`, at close and at interpreter exit). This is RabbitMQ's
default (no publisher confirms).

Guarantees:

* Each publish is its own transaction (a Sync after it), committed as durably as
  ``durable_publish`` says, in the order sent. A fanout's jobs commit together.
* A publish the server refuses is retried once through the confirmed path; if that
  fails too, the error is raised from the call that found it (a later publish or a
  flush), and logged with the message ids.
* A lost connection re-sends every publish not yet confirmed on a new one, so a
  publish whose commit was not confirmed may be enqueued twice (at-least-once).
* Only a process that dies abruptly (SIGKILL, ``os._exit``) within a round trip of a
  publish can lose it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ...errors import StoreUnavailable
from .session import Answer, PipelineSession

logger = logging.getLogger("kombu_alkstore")

#: The statement a publish runs (one per job of the publish).
STATEMENT = "insert"
#: Publishes in flight before a send waits for answers (bounds memory and keeps the
#: server's answers from filling the socket while the client only writes).
MAX_IN_FLIGHT = 1000
#: Seconds a blocking collect waits for the server's next answer.
ANSWER_TIMEOUT = 30.0

_live: weakref.WeakSet[PipelinedPublisher] = weakref.WeakSet()


class PipelinedPublisher:
    """One process's pipelined INSERTs for one store (thread-safe, fork-aware)."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection],
        sql: str,
        fallback: Callable[[list[dict[str, Any]]], Any],
        prepared: bool = True,
    ) -> None:
        self._connect = connect
        self._sql = sql
        #: False behind a transaction-mode pooler: unnamed statements, which need no
        #: server session of their own.
        self._prepared = prepared
        self._fallback = fallback
        self._lock = threading.Lock()
        self._session: PipelineSession | None = None
        self._pid = os.getpid()
        #: Publishes sent and not yet confirmed, oldest first: a list of param dicts each.
        self._in_flight: deque[list[dict[str, Any]]] = deque()
        self._failed: list[tuple[list[dict[str, Any]], str]] = []
        _live.add(self)

    # ------------------------------------------------------------------- public
    def send(self, batch: list[dict[str, Any]]) -> None:
        """Send one publish (its jobs commit together) and return without waiting."""
        with self._lock:
            self._forked()
            self._collect(block=len(self._in_flight) >= MAX_IN_FLIGHT)
            # A new connection carries every unconfirmed publish.
            fresh = self._session is None or self._session.closed
            self._in_flight.append(batch)
            try:
                try:
                    self._write(list(self._in_flight) if fresh else [batch])
                except psycopg.OperationalError as exc:
                    self._lost(exc)
            except Exception:
                # The caller sees the error and owns this publish (kombu may retry it);
                # the older unconfirmed ones stay here and go out on the next send.
                if self._in_flight and self._in_flight[-1] is batch:
                    self._in_flight.pop()
                raise
            self._retry_failed()

    def flush(self) -> None:
        """Wait until every publish sent is confirmed (or re-sent and confirmed)."""
        with self._lock:
            self._forked()
            self._collect(block=True)
            self._retry_failed()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def close(self) -> None:
        """Confirm what is in flight (logging what cannot be), then disconnect."""
        try:
            self.flush()
        except Exception as exc:  # closing must not raise; say what may be lost
            with self._lock:
                lost = sum(len(b) for b in self._in_flight)
                self._in_flight.clear()
            if lost:
                logger.error(
                    "alkstore: %d pipelined publish(es) could not be confirmed at close: %r",
                    lost,
                    exc,
                )
        with self._lock:
            if self._session is not None and os.getpid() == self._pid:
                self._session.close()
            self._session = None

    # ------------------------------------------------------------------ plumbing
    def _forked(self) -> None:
        if os.getpid() != self._pid:  # never touch the parent's socket or its backlog
            self._pid = os.getpid()
            self._session = None
            self._in_flight.clear()
            self._failed.clear()

    def _open(self) -> PipelineSession:
        if self._session is None or self._session.closed:
            self._session = PipelineSession(
                self._connect(), {STATEMENT: self._sql}, prepared=self._prepared, rows=False
            )
        return self._session

    def _write(self, batches: Sequence[list[dict[str, Any]]]) -> None:
        session = self._open()
        for batch in batches:
            session.send([(STATEMENT, params) for params in batch])
        session.flush()

    def _collect(self, block: bool) -> None:
        """Read the answers that have arrived (all of them if ``block``)."""
        try:
            while self._in_flight and self._session is not None:
                answers: list[Answer] = []
                try:
                    self._session.read(answers)
                finally:
                    for answer in answers:
                        self._settle(answer)
                if not self._in_flight or not block:
                    return
                if not self._session.readable(ANSWER_TIMEOUT):
                    raise psycopg.OperationalError(
                        f"no answer from the server in {ANSWER_TIMEOUT:g} s"
                    )
            if block and self._in_flight:  # connection gone: send them again
                self._resend()
        except psycopg.OperationalError as exc:
            self._lost(exc)
            if block:
                self._collect(block=True)

    def _settle(self, answer: Answer) -> None:
        """The publish at the head is answered: confirmed, or refused (retried later)."""
        batch = self._in_flight.popleft()
        if isinstance(answer, BaseException):
            self._failed.append((batch, str(answer).strip() or type(answer).__name__))

    def _lost(self, exc: BaseException) -> None:
        """The connection broke: forget it; what was in flight is sent again."""
        logger.warning(
            "alkstore: publish connection lost (%r); re-sending %d unconfirmed publish(es)",
            exc,
            len(self._in_flight),
        )
        if self._session is not None:
            try:
                self._session.close()
            finally:
                self._session = None
        self._resend()

    def _resend(self) -> None:
        if not self._in_flight:
            return
        try:
            self._write(list(self._in_flight))
        except psycopg.OperationalError as exc:
            self._session = None
            raise StoreUnavailable(
                f"cannot send {len(self._in_flight)} publish(es) again: {exc}"
            ) from exc

    def _retry_failed(self) -> None:
        """Publishes the server refused: once more, confirmed; raise if that fails."""
        while self._failed:
            batch, error = self._failed.pop(0)
            try:
                self._fallback(batch)
            except Exception:
                logger.error(
                    "alkstore: publish of %s refused (%s) and again on retry",
                    [p.get("msg_id") for p in batch],
                    error,
                )
                raise


@atexit.register
def _flush_all() -> None:
    for publisher in list(_live):
        publisher.close()
