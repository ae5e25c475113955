"""One connection in libpq pipeline mode: named statements sent without waiting.

Both clients that must not wait for the server's answers are built on
:class:`PipelineSession`: the claim session (``claims.py``: claims and acks answered
from an event loop) and the pipelined publisher (``publisher.py``: publishes with
``confirm_publish`` off). A session prepares its statements once (unnamed ones behind a
transaction-mode pooler), then each request (one or more statements and a Sync) is its
own transaction, run in send order; :meth:`PipelineSession.read` returns the answers
that have arrived, in the same order: the rows (mappings by column name) of the
request's last statement that returned rows, or the error of its first failed one.

Not thread-safe: its owner serialises the calls.
"""

from __future__ import annotations

import re
import select
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .compat import send_query_prepared

#: What a request came to: its rows by column name, or the exception it raised.
Answer = list[dict[str, Any]] | BaseException

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_BINARY = (bytes, bytearray, memoryview)
#: Seconds a write waits for the socket when the server is slow to read.
WRITE_TIMEOUT = 30.0


def positional(sql: str) -> tuple[bytes, list[str]]:
    """``%(name)s`` placeholders as ``$n`` (a repeated name reuses its number)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, sql).encode("utf-8"), names


class PipelineSession:
    """Named statements on one connection in pipeline mode (see the module docstring)."""

    def __init__(
        self,
        conn: psycopg.Connection,
        statements: Mapping[str, str],
        prepared: bool = True,
        rows: bool = True,
    ) -> None:
        """``prepared=False`` (behind a transaction-mode pooler) sends each statement
        unnamed, so none outlives the server session it was sent on; ``rows=False``
        answers ``[]`` for every request that succeeded (its rows are not decoded)."""
        self.conn = conn
        self._pg = conn.pgconn
        self._tx = Transformer(conn)
        self._prepared = prepared
        self._decode = rows
        self._queries: dict[str, bytes] = {}
        self._names: dict[str, list[str]] = {}
        self._keys: dict[str, bytes] = {}
        for key, sql in statements.items():
            query, names = positional(sql)
            self._queries[key], self._names[key], self._keys[key] = query, names, key.encode()
            if not prepared:
                continue
            result = self._pg.prepare(self._keys[key], query)
            if result.status != pq.ExecStatus.COMMAND_OK:
                conn.close()
                raise psycopg.OperationalError(
                    f"cannot prepare statement {key!r}: {result.get_error_message()}"
                )
        self._pg.nonblocking = 1
        self._pg.enter_pipeline_mode()
        #: Requests sent and not yet answered.
        self.sent = 0
        self._answer: Answer | None = None

    # ------------------------------------------------------------------- public
    @property
    def closed(self) -> bool:
        return self.conn.closed

    def fileno(self) -> int:
        return self._pg.socket

    def send(self, statements: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Write one request: the statements ``(key, params)`` and a Sync (one
        transaction). Call :meth:`flush` to push it to the server."""
        for key, params in statements:
            values = [params[n] for n in self._names[key]]
            formats = [PyFormat.BINARY if isinstance(v, _BINARY) else PyFormat.TEXT for v in values]
            dumped = self._tx.dump_sequence(values, formats)
            if self._prepared:
                send_query_prepared(self._pg, self._keys[key], dumped, self._tx.formats)
            else:
                self._pg.send_query_params(
                    self._queries[key], dumped, param_formats=self._tx.formats
                )
        self._pg.pipeline_sync()
        self.sent += 1

    def flush(self, on_input: Callable[[], None] | None = None) -> None:
        """Send what was written. While the server is slow to read, what it sent is
        read meanwhile (so neither side stalls) by ``on_input`` (default: buffered for
        :meth:`read`)."""
        while self._pg.flush():  # 1: more to send
            sock = self._pg.socket
            readable, _, _ = select.select([sock], [sock], [], WRITE_TIMEOUT)
            if readable:
                if on_input is None:
                    self._pg.consume_input()
                else:
                    on_input()

    def read(self, into: list[Answer]) -> None:
        """Append the answers that have arrived to ``into``, without blocking; raises
        :class:`psycopg.OperationalError` (after appending those) when the connection
        is lost."""
        self._pg.consume_input()
        while self.sent and not self._pg.is_busy():
            self._take(self._pg.get_result(), into)
        if self._pg.status == pq.ConnStatus.BAD:
            raise psycopg.OperationalError("the connection was lost")

    def readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the server to send something."""
        return bool(select.select([self._pg.socket], [], [], timeout)[0])

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ plumbing
    def _take(self, result: pq.abc.PGresult | None, into: list[Answer]) -> None:
        if result is None:  # the end of one statement's results
            return
        status = result.status
        failed = isinstance(self._answer, BaseException)
        if status == pq.ExecStatus.PIPELINE_SYNC:  # the request at the head is settled
            answer, self._answer = self._answer, None
            self.sent -= 1
            into.append([] if answer is None else answer)
        elif status == pq.ExecStatus.TUPLES_OK and not failed:
            self._answer = self._rows(result) if self._decode else []
        elif status == pq.ExecStatus.FATAL_ERROR and not failed:
            self._answer = psycopg.errors.error_from_result(result, encoding=self._tx.encoding)
        elif status == pq.ExecStatus.PIPELINE_ABORTED and not failed:
            self._answer = psycopg.OperationalError("pipeline aborted")

    def _rows(self, result: pq.abc.PGresult) -> list[dict[str, Any]]:
        self._tx.set_pgresult(result)
        names = [(result.fname(i) or b"?").decode() for i in range(result.nfields)]
        return [
            dict(zip(names, row, strict=True))
            for row in self._tx.load_rows(0, result.ntuples, tuple)
        ]
