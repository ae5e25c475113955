"""A test double of the claims interface (``ClaimSession``) and of kombu's event loop, so
the transport's scheduling and ack buffer run without a database.

:class:`RecordingClaims` records each operation and keeps its callback, as a pipelined
session would, until the test answers it (:meth:`RecordingClaims.answer`): the test
chooses what the database said and when. :class:`FakeLoop` keeps ``call_later`` entries
until the test fires them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kombu_alkstore.store import ClaimSession


@dataclass
class Sent:
    """One operation sent, not yet answered."""

    op: str
    args: tuple
    callback: Callable[..., None]


class RecordingClaims(ClaimSession):
    """Every operation is recorded in ``sent`` and answered only by :meth:`answer`."""

    def __init__(self) -> None:
        self.sent: deque[Sent] = deque()
        self.closed = False

    def _send(self, op: str, callback: Callable[..., None], *args: Any) -> None:
        self.sent.append(Sent(op, args, callback))

    def ops(self) -> list[str]:
        """The operations waiting for an answer, in send order."""
        return [s.op for s in self.sent]

    def answer(self, op: str, *value: Any) -> Sent:
        """Answer the oldest unanswered ``op`` with ``value`` (the callback runs now)."""
        for s in self.sent:
            if s.op == op:
                self.sent.remove(s)
                s.callback(*value)
                return s
        raise AssertionError(f"no {op!r} in flight: {self.ops()}")

    # ClaimSession
    def fileno(self) -> int:
        return -1

    def on_readable(self) -> None:
        pass

    def in_flight(self) -> int:
        return len(self.sent)

    def wait(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def claim(self, queues: Sequence[str], limit: int, callback: Callable) -> None:
        self._send("claim", callback, tuple(queues), limit)

    def ack(self, deliveries: Sequence[Any], callback: Callable) -> None:
        self._send("ack", callback, list(deliveries))

    def write_rates(self, rows: Any, trim_before: Any, callback: Callable) -> None:
        self._send("write_rates", callback, rows, trim_before)

    def release(self, deliveries: Sequence[Any], callback: Callable) -> None:
        self._send("release", callback, list(deliveries))

    def has_due(self, queues: Sequence[str], callback: Callable) -> None:
        self._send("has_due", callback, tuple(queues))

    def heartbeat(self, deliveries: Sequence[Any], callback: Callable) -> None:
        self._send("heartbeat", callback, list(deliveries))

    def next_due(self, queues: Sequence[str], callback: Callable) -> None:
        self._send("next_due", callback, tuple(queues))

    def touch_queues(self, queues: Sequence[str], callback: Callable) -> None:
        self._send("touch_queues", callback, tuple(queues))

    def lease_acquire(self, name: str, owner: str, ttl: float, callback: Callable) -> None:
        self._send("lease_acquire", callback, name, owner, ttl)

    def register(self, address: Any, channel: Any, queues: Any, slots: int, callback: Callable):
        self._send("register", callback, address, channel, tuple(queues), slots)


@dataclass
class FakeLoop:
    """kombu's Hub as far as the transport's timers use it."""

    later: list[tuple[float, Callable[[], Any]]] = field(default_factory=list)

    def call_later(self, delay: float, fn: Callable[[], Any], *args: Any) -> None:
        self.later.append((delay, fn))

    def fire(self) -> None:
        """Run every timer set so far (those they set wait for the next call)."""
        due, self.later = self.later, []
        for _, fn in due:
            fn()
