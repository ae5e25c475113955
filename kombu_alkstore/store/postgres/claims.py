"""The claim session: claims, acks and a worker's slow timers answered from an event loop.

Inside a Celery worker the event loop is also the only thread that feeds the pool, so a
claim or an ack that blocks for its round trip stalls every task behind it. A
:class:`PostgresClaimSession` writes each request on its own connection (a
:class:`.session.PipelineSession`, its statements prepared) and returns at once; its
socket is registered with the loop, and each answer is handed to its callback, in send
order, when it arrives.

Guarantees:

* Each request is its own transaction, run in send order.
* Every callback is called exactly once: with the outcome, or with the exception the
  statement raised. When the connection is lost, the callbacks of the requests still in
  flight get the :class:`psycopg.OperationalError`; their effect is unknown (a claim
  that committed lapses after its visibility timeout, an ack that did not land lets its
  message be delivered again), which is what at-least-once delivery allows.
* Not thread-safe: one thread (the event loop's) sends and reads.
* Each request learns what it took on the server, as far as the client can tell: from
  when it was sent, or the answer before it read (the server runs them in order), to
  when its answer was read (:attr:`_Request.took`). A claim that walked from the head
  hands that to the floors, which start the watch behind them when it keeps growing
  (``ClaimFloors.walked``, lookbehind.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from ..admin import RatePoint
from ..checks import check_lease_ttl
from ..claims import Answer, ClaimSession
from ..values import Delivery
from .session import Answer as Rows
from .session import PipelineSession
from .statements import (
    SESSION_STATEMENTS,
    claim_key,
    claim_params,
    claimed_deliveries,
    handles,
    pend_params,
    rates_params,
)

if TYPE_CHECKING:
    from .store import PostgresStore

#: Seconds :meth:`PostgresClaimSession.wait` waits for the server before it gives up.
WAIT_TIMEOUT = 30.0


class PostgresClaimSession(ClaimSession):
    """A store's claim session (see the module docstring)."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection) -> None:
        self._store = store
        self._statements = store.statements
        prepared = not store.options.transaction_pooler
        self._pipe = PipelineSession(
            conn, self._statements.subset(SESSION_STATEMENTS), prepared=prepared
        )
        #: The requests sent and not yet answered, oldest first.
        self._waiting: deque[_Request] = deque()
        #: When the last answer was read (the server was on to the next request).
        self._answered_at = 0.0
        self.broken = False
        if store.floors.watched:
            store.floor_watch.ensure_started()  # the walk behind the floors, off this session

    @property
    def _conn(self) -> psycopg.Connection:
        return self._pipe.conn

    # -------------------------------------------------------------- connection
    def fileno(self) -> int:
        return self._pipe.fileno()

    def in_flight(self) -> int:
        return len(self._waiting)

    def on_readable(self) -> None:
        answers: list[Rows] = []
        try:
            self._pipe.read(answers)
        except psycopg.OperationalError as exc:
            self._fail(exc, self._pair(answers))
            raise
        self._run(self._pair(answers))

    def wait(self, timeout: float = WAIT_TIMEOUT) -> None:
        while self._waiting:
            if not self._pipe.readable(timeout):
                self.close()
                raise psycopg.OperationalError(f"no answer from the server in {timeout} s")
            self.on_readable()

    def close(self) -> None:
        try:
            self._fail(psycopg.OperationalError("the claim connection was closed"), [])
        finally:
            self._pipe.close()

    # ---------------------------------------------------------------- requests
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        callback: Callable[[list[Delivery] | BaseException, bool], None],
    ) -> None:
        queues = list(dict.fromkeys(queues))
        floors = self._store.floors
        bands, plan = floors.plan(queues)

        def answered(rows: Rows) -> None:
            if isinstance(rows, BaseException):
                callback(rows, False)
                return
            floors.learn(plan, rows)
            if floors.walked(plan, request.took):  # slow from the head: look from a thread
                self._store.floor_watch.ensure_started()
            callback(*claimed_deliveries(rows))

        request = self._send(claim_key(queues), claim_params(queues, int(limit), bands), answered)

    def ack(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        held = list(deliveries)

        def answered(rows: Rows) -> None:
            if isinstance(rows, BaseException):
                callback(rows)
                return
            landed = {r["id"] for r in rows}
            self._store.rates_tally.acked(held, landed)
            callback(landed)

        self._send("ack", handles(held), answered)

    def heartbeat(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        params = {**handles(list(deliveries)), "extend": None}
        self._send("heartbeat", params, _outcome(callback, _ids))

    def release(self, deliveries: Sequence[Delivery], callback: Answer) -> None:
        params = pend_params([(d, 0.0, 1) for d in deliveries])
        self._send("pend", params, _outcome(callback, _ids))

    def has_due(self, queues: Sequence[str], callback: Answer) -> None:
        def answered(rows: Rows) -> None:
            callback(rows if isinstance(rows, BaseException) else bool(rows and rows[0]["due"]))

        self._send("has_due", self._store.probe_params(queues), answered)

    def next_due(self, queues: Sequence[str], callback: Answer) -> None:
        params = self._store.probe_params(queues)
        self._send("next_due", params, _outcome(callback, lambda rows: rows[0]["next_due"]))

    def touch_queues(self, queues: Sequence[str], callback: Answer) -> None:
        def touched(rows: Rows) -> set[str] | BaseException:
            return rows if isinstance(rows, BaseException) else {r["name"] for r in rows}

        self._send("touch_queues", {"names": list(queues)}, lambda rows: callback(touched(rows)))

    def lease_acquire(self, name: str, owner: str, ttl: float, callback: Answer) -> None:
        check_lease_ttl(ttl)
        params = {"name": name, "owner": owner, "ttl": ttl}
        self._send("lease_acquire", params, _outcome(callback, bool))

    def register(
        self, address: int, chan: int, queues: Sequence[str], slots: int, callback: Answer
    ) -> None:
        params = {"pid": address, "chan": chan, "queues": list(queues), "slots": int(slots)}
        self._send("register", params, _outcome(callback, _open))

    def write_rates(
        self, rows: Sequence[RatePoint], trim_before: float | None, callback: Answer
    ) -> None:
        if rows:
            params = rates_params(list(rows))
            self._send("rates_add", params, _outcome(callback, _none))
        if trim_before is not None:
            self._send("rates_trim", {"before": trim_before}, _outcome(callback, _none))

    # ---------------------------------------------------------------- plumbing
    def _send(
        self, key: str, params: Mapping[str, Any], callback: Callable[[Rows], None]
    ) -> _Request:
        """Send statement ``key``; ``callback`` gets its rows or its exception. Raises
        :class:`psycopg.OperationalError` (after failing every callback in flight) when
        the connection is lost."""
        if self.broken:
            raise psycopg.OperationalError("the claim connection was lost")
        request = _Request(callback)
        try:
            self._pipe.send([(key, self._statements.params(params))])
            self._waiting.append(request)
            self._pipe.flush(self.on_readable)  # rare: the socket buffer is full
        except psycopg.OperationalError as exc:
            self._fail(exc, [])
            raise
        return request

    def _pair(self, answers: list[Rows]) -> list[tuple[Callable[[Rows], None], Rows]]:
        now = time.monotonic()
        paired = []
        for answer in answers:
            request = self._waiting.popleft()
            request.took = now - max(request.sent, self._answered_at)
            self._answered_at = now
            paired.append((request.callback, answer))
        return paired

    def _fail(self, exc: BaseException, answered: list) -> None:
        """The connection is gone: run the callbacks already ``answered``, then give
        ``exc`` to every request still in flight."""
        self.broken = True
        answered += [(request.callback, exc) for request in self._waiting]
        self._waiting.clear()
        self._run(answered)

    @staticmethod
    def _run(answered: list[tuple[Callable[[Rows], None], Rows]]) -> None:
        """Run every callback even if one raises; then raise the first error."""
        error: BaseException | None = None
        for callback, answer in answered:
            try:
                callback(answer)
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error


class _Request:
    """A request in flight: its callback, when it was sent, and (once answered) about
    how long the server took to run it (0 when its answer came in one read with the one
    before it: the client cannot tell them apart)."""

    __slots__ = ("callback", "sent", "took")

    def __init__(self, callback: Callable[[Rows], None]) -> None:
        self.callback = callback
        self.sent = time.monotonic()
        self.took = 0.0


def _none(rows: Any) -> None:
    return None


def _open(rows: Any) -> bool:
    return bool(rows[0]["open"])


def _ids(rows: Any) -> set[int]:
    return {r["id"] for r in rows}


def _outcome(callback: Answer, convert: Callable[[Any], Any]) -> Callable[[Rows], None]:
    """``callback`` with the rows converted, or with the exception as it is."""

    def answered(rows: Rows) -> None:
        callback(rows if isinstance(rows, BaseException) else convert(rows))

    return answered
