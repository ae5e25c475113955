"""The wake-up interface: how a consumer learns that work is due (:class:`Waiter`) and
what it learnt (:class:`Wakeup`). Each engine package implements :class:`Waiter`."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from .values import Delivery


@dataclass
class Wakeup:
    """What a waiter saw: queues with due work, or ``any`` when the engine cannot tell."""

    queues: set[str] = field(default_factory=set)
    any: bool = False
    #: The earliest future ``run_at`` announced (delayed work), if any.
    next_at: float | None = None
    #: Exchanges or bindings changed (engines that announce it: PostgreSQL).
    routing: bool = False
    #: Jobs a publisher handed to this waiter, already claimed: ``(channel number,
    #: delivery)`` (PostgreSQL; see ``Channel.take_handoff``).
    handoffs: list[tuple[int, Delivery]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.any or bool(self.queues) or bool(self.handoffs)

    def merge(self, other: Wakeup) -> None:
        """Add what ``other`` saw."""
        self.queues |= other.queues
        self.any |= other.any
        self.routing |= other.routing
        self.handoffs += other.handoffs
        if other.next_at and (self.next_at is None or other.next_at < self.next_at):
            self.next_at = other.next_at


class Waiter(abc.ABC):
    """A wake-up source for new work; one per consumer, not shared between threads."""

    @abc.abstractmethod
    def fileno(self) -> int | None:
        """A socket to select on (PostgreSQL), or None when the engine polls (SQLite)."""

    @abc.abstractmethod
    def poll(self) -> Wakeup:
        """Collect pending wake-ups without blocking."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> Wakeup:
        """Block until work is announced or ``timeout`` seconds pass."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    def address(self) -> int | None:
        """Where publishers hand jobs to this waiter's offers (engines with hand-off:
        see :meth:`ClaimSession.register`); None otherwise."""
        return None

    def retire(self) -> list[tuple[int, Delivery]]:
        """Withdraw this waiter's hand-off offers; return hand-offs that arrived meanwhile."""
        return []

    def hear_wakeups(self, on: bool) -> bool:
        """Stop (``on`` False) or resume hearing the store's announcements of new jobs and
        routing changes; hand-offs to this waiter keep arriving either way. Resumed, every
        job committed from then on is announced; one committed before is found by the
        claim the caller makes next (publishes no waiter hears may announce nothing).
        Returns False when the engine cannot stop them (they are always heard)."""
        return False
