"""Claims and acks sent without waiting, answered from the event loop (PostgreSQL).

Inside a Celery worker the event loop is also the only thread that feeds the pool, so a
claim or an ack that blocks for its round trip stalls every task behind it. An
:class:`AsyncSession` writes statements on a dedicated connection in libpq pipeline
mode and returns at once; its socket is registered with the loop, and each answer is
handed to its callback, in send order, when it arrives.

Guarantees:

* Each statement is its own transaction (a Sync after it), run in send order.
* Every callback is called exactly once: with the rows, or with the exception the
  statement raised. When the connection is lost, the callbacks of the statements still
  in flight get the :class:`psycopg.OperationalError`; their effect is unknown (a claim
  that committed lapses after its visibility timeout, an ack that did not land lets its
  message be delivered again), which is what at-least-once delivery allows.
* Not thread-safe: one thread (the event loop's) sends and reads.
"""

from __future__ import annotations

import select
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .pipeline import positional

#: Called with the statement's rows, or with the exception it raised.
Callback = Callable[[list[tuple] | BaseException], None]
#: Seconds :meth:`AsyncSession.wait` waits for the server before it gives up.
WAIT_TIMEOUT = 30.0


class AsyncSession:
    """One connection's statements in flight, answered through callbacks."""

    def __init__(
        self, conn: psycopg.Connection, statements: Mapping[str, str], prepared: bool = True
    ) -> None:
        """``prepared=False`` (behind a transaction-mode pooler) sends each statement
        unnamed, so no statement outlives the server session it was sent on."""
        self._conn = conn
        self._pg = conn.pgconn
        self._tx = Transformer(conn)
        self._names: dict[str, list[str]] = {}
        self._queries: dict[str, bytes] = {}
        self._prepared = prepared
        for key, sql in statements.items():
            query, names = positional(sql)
            self._queries[key] = query
            if not prepared:
                self._names[key] = names
                continue
            result = self._pg.prepare(key.encode(), query)
            if result.status != pq.ExecStatus.COMMAND_OK:
                conn.close()
                raise psycopg.OperationalError(
                    f"cannot prepare statement {key!r}: {result.get_error_message()}"
                )
            self._names[key] = names
        self._pg.nonblocking = 1
        self._pg.enter_pipeline_mode()
        #: Callbacks of the statements sent and not yet answered, oldest first.
        self._waiting: deque[Callback] = deque()
        self._rows: list[tuple] | BaseException | None = None
        self.broken = False

    # ------------------------------------------------------------------- public
    def fileno(self) -> int:
        return self._pg.socket

    def in_flight(self) -> int:
        return len(self._waiting)

    def send(self, key: str, params: Mapping[str, Any], callback: Callback) -> None:
        """Send the prepared statement ``key`` with ``params``; ``callback`` gets its answer.

        Raises :class:`psycopg.OperationalError` (after failing every callback in
        flight) when the connection is lost.
        """
        if self.broken:
            raise psycopg.OperationalError("the claim connection was lost")
        values = self._tx.dump_sequence(
            [params[n] for n in self._names[key]], [PyFormat.TEXT] * len(self._names[key])
        )
        try:
            if self._prepared:
                self._pg.send_query_prepared(key.encode(), values, self._tx.formats)
            else:
                self._pg.send_query_params(
                    self._queries[key], values, param_formats=self._tx.formats
                )
            self._pg.pipeline_sync()
            self._waiting.append(callback)
            while self._pg.flush():  # rare: the socket buffer is full; read meanwhile
                readable, _, _ = select.select([self._pg.socket], [self._pg.socket], [], 30.0)
                if readable:
                    self.on_readable()
        except psycopg.OperationalError as exc:
            self._fail(exc, [])
            raise

    def on_readable(self) -> None:
        """Read what the server sent and run the callbacks of the answered statements."""
        answered: list[tuple[Callback, list[tuple] | BaseException]] = []
        try:
            self._pg.consume_input()
            while self._waiting and not self._pg.is_busy():
                self._take(self._pg.get_result(), answered)
            if self._pg.status == pq.ConnStatus.BAD:
                raise psycopg.OperationalError("the claim connection was lost")
        except psycopg.OperationalError as exc:
            self._fail(exc, answered)
            raise
        self._run(answered)

    def wait(self, timeout: float = WAIT_TIMEOUT) -> None:
        """Block until every statement in flight is answered (its callback run)."""
        while self._waiting:
            if not select.select([self._pg.socket], [], [], timeout)[0]:
                self.close()
                raise psycopg.OperationalError(f"no answer from the server in {timeout} s")
            self.on_readable()

    def close(self) -> None:
        """Disconnect; statements still in flight fail (see the guarantees above)."""
        try:
            self._fail(psycopg.OperationalError("the claim connection was closed"), [])
        finally:
            self._conn.close()

    # ------------------------------------------------------------------ plumbing
    def _take(self, result: pq.abc.PGresult | None, answered: list) -> None:
        if result is None:  # the end of one statement's results; its Sync follows
            return
        status = result.status
        if status == pq.ExecStatus.PIPELINE_SYNC:
            answer, self._rows = self._rows, None
            answered.append((self._waiting.popleft(), [] if answer is None else answer))
        elif status == pq.ExecStatus.TUPLES_OK:
            self._tx.set_pgresult(result)
            self._rows = self._tx.load_rows(0, result.ntuples, tuple)
        elif status == pq.ExecStatus.FATAL_ERROR:
            self._rows = psycopg.errors.error_from_result(result, encoding=self._tx.encoding)
        elif status == pq.ExecStatus.PIPELINE_ABORTED:  # not expected: one statement a Sync
            self._rows = psycopg.OperationalError("pipeline aborted")

    def _fail(self, exc: BaseException, answered: list) -> None:
        """The connection is gone: run the callbacks already ``answered``, then give
        ``exc`` to every statement still in flight."""
        self.broken = True
        answered += [(callback, exc) for callback in self._waiting]
        self._waiting.clear()
        self._run(answered)

    @staticmethod
    def _run(answered: list[tuple[Callback, list[tuple] | BaseException]]) -> None:
        """Run every callback even if one raises; then raise the first error."""
        error: BaseException | None = None
        for callback, answer in answered:
            try:
                callback(answer)
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
