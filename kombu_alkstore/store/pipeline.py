"""Publishes sent without waiting for their commit (PostgreSQL, ``confirm_publish`` off).

A publish normally costs one round trip: ``apply_async`` returns once the row is
committed. With ``confirm_publish`` off, each publish is written to a dedicated
connection in libpq pipeline mode and the call returns at once; the server's answers
are read later (at the next publish, at :meth:`PipelinedPublisher.flush`, at close and
at interpreter exit). This is RabbitMQ's default (no publisher confirms).

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
import re
import select
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import pq

from ..errors import StoreUnavailable

logger = logging.getLogger("kombu_alkstore")

_STATEMENT = b"alkstore_publish"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
#: Publishes in flight before a send waits for answers (bounds memory and keeps the
#: server's answers from filling the socket while the client only writes).
MAX_IN_FLIGHT = 1000

_live: weakref.WeakSet[PipelinedPublisher] = weakref.WeakSet()


def positional(sql: str) -> tuple[bytes, list[str]]:
    """``%(name)s`` placeholders as ``$n`` (a repeated name reuses its number)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, sql).encode("utf-8"), names


def _encode(value: Any) -> tuple[bytes | None, int]:
    """A parameter as (bytes, format): bytes go binary (bytea), the rest as text."""
    if value is None:
        return None, 0
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), 1
    if isinstance(value, float):
        return repr(value).encode("ascii"), 0
    return str(value).encode("utf-8"), 0


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
        self._sql, self._names = positional(sql)
        #: False behind a transaction-mode pooler: unnamed statements, which need no
        #: server session of their own.
        self._prepared = prepared
        self._fallback = fallback
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._pid = os.getpid()
        #: Publishes sent and not yet confirmed, oldest first: a list of param dicts each.
        self._in_flight: deque[list[dict[str, Any]]] = deque()
        self._failed: list[tuple[list[dict[str, Any]], str]] = []
        self._error: str | None = None
        _live.add(self)

    # ------------------------------------------------------------------- public
    def send(self, batch: list[dict[str, Any]]) -> None:
        """Send one publish (its jobs commit together) and return without waiting."""
        with self._lock:
            self._forked()
            self._collect(block=len(self._in_flight) >= MAX_IN_FLIGHT)
            # A new connection carries every unconfirmed publish.
            fresh = self._conn is None or self._conn.closed
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
            if self._conn is not None and os.getpid() == self._pid:
                self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ plumbing
    def _forked(self) -> None:
        if os.getpid() != self._pid:  # never touch the parent's socket or its backlog
            self._pid = os.getpid()
            self._conn = None
            self._in_flight.clear()
            self._failed.clear()

    def _pgconn(self) -> pq.abc.PGconn:
        if self._conn is None or self._conn.closed:
            conn = self._connect()
            pg = conn.pgconn
            result = pg.prepare(_STATEMENT, self._sql) if self._prepared else None
            if result is not None and result.status != pq.ExecStatus.COMMAND_OK:
                conn.close()
                raise psycopg.OperationalError(
                    f"cannot prepare the publish statement: {result.get_error_message()}"
                )
            pg.nonblocking = 1
            pg.enter_pipeline_mode()
            self._conn = conn
        return self._conn.pgconn

    def _write(self, batches: Sequence[list[dict[str, Any]]]) -> None:
        pg = self._pgconn()
        for batch in batches:
            for params in batch:
                values, formats = zip(*(_encode(params[n]) for n in self._names), strict=True)
                if self._prepared:
                    pg.send_query_prepared(_STATEMENT, values, formats)
                else:
                    pg.send_query_params(self._sql, values, param_formats=formats)
            pg.pipeline_sync()
        while pg.flush():  # 1: more to send; read answers meanwhile so neither side stalls
            readable, _, _ = select.select([pg.socket], [pg.socket], [], 30.0)
            if readable:
                pg.consume_input()

    def _collect(self, block: bool) -> None:
        """Read the answers that have arrived (all of them if ``block``)."""
        try:
            while self._in_flight and self._conn is not None:
                pg = self._conn.pgconn
                pg.consume_input()
                if pg.is_busy():
                    if not block:
                        return
                    if not select.select([pg.socket], [], [], 30.0)[0]:
                        raise psycopg.OperationalError("no answer from the server in 30 s")
                    continue
                self._take(pg.get_result())
            if block and self._in_flight:  # connection gone: send them again
                self._resend()
        except psycopg.OperationalError as exc:
            self._lost(exc)
            if block:
                self._collect(block=True)

    def _take(self, result: pq.abc.PGresult | None) -> None:
        if result is None:  # end of one statement's results
            return
        status = result.status
        if status == pq.ExecStatus.PIPELINE_SYNC:  # the publish at the head is settled
            batch = self._in_flight.popleft()
            if self._error is not None:
                self._failed.append((batch, self._error))
                self._error = None
        elif status == pq.ExecStatus.FATAL_ERROR:
            self._error = (result.get_error_message() or "error").strip()
        elif status == pq.ExecStatus.PIPELINE_ABORTED:
            self._error = self._error or "pipeline aborted"
        if self._conn is not None and self._conn.pgconn.status == pq.ConnStatus.BAD:
            raise psycopg.OperationalError("the publish connection was lost")

    def _lost(self, exc: BaseException) -> None:
        """The connection broke: forget it; what was in flight is sent again."""
        logger.warning(
            "alkstore: publish connection lost (%r); re-sending %d unconfirmed publish(es)",
            exc,
            len(self._in_flight),
        )
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
        self._error = None
        self._resend()

    def _resend(self) -> None:
        if not self._in_flight:
            return
        try:
            self._write(list(self._in_flight))
        except psycopg.OperationalError as exc:
            self._conn = None
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
