"""The state of one kombu connection that its parts share, and the operations they all use.

Claim scheduling, hand-off, quiet mode, heartbeats and the ack buffer each need the
connection's store, its claims session, its event loop and its channels, and ask the same
questions of them: now on the database's clock, which claims interface the caller may
use, whether an answer is one to act on. They get a :class:`Link`, not the transport: the
transport (lifecycle and wiring) sets its fields, and no part calls back into the
transport.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..store import Delivery, Store, Waiter
from .immediate import ImmediateClaims

logger = logging.getLogger("kombu_alkstore")


class Link:
    """One connection's store, claims session, event loop, waiter and channels.

    Guarantees: :meth:`claims_here` hands the claims session only to the event loop's
    thread (the only one that may use it); :meth:`guarded` marks the connection lost on
    a connection error, after which nothing is handed back through it.
    """

    def __init__(self, channels: list[Any], connection_errors: tuple[type[BaseException], ...]):
        #: The transport's channels (kombu's list, the same object).
        self.channels = channels
        self.connection_errors = connection_errors
        self.store: Store | None = None
        #: The routing cache of the store (set with it).
        self.routing: Any = None
        #: In the event loop, on engines with a claims session: claims and acks that do
        #: not block it (``Store.session``).
        self.claims: Any = None
        self.loop: Any = None
        self.waiter: Waiter | None = None
        #: Set once a connection error was seen: no hand-back through a dead link.
        self.lost = False
        self._loop_thread: int | None = None
        self._listening = False

    # ------------------------------------------------------------ the event loop
    def attach(self, loop: Any) -> None:
        """The event loop (or None): its thread is the one that may use the session."""
        self.loop = loop
        self._loop_thread = threading.get_ident() if loop is not None else None

    def in_loop_thread(self) -> bool:
        """Whether the caller runs in the event loop's thread."""
        return self.loop is not None and threading.get_ident() == self._loop_thread

    def guarded(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` for the event loop: a connection error marks this connection lost (so
        closing it hands nothing back) and propagates, so Celery reconnects."""

        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except self.connection_errors:
                self.lost = True
                raise

        return call

    def open_waiter(self) -> Waiter:
        """The wake-up source of this connection, opened on first use."""
        if self.waiter is None:
            assert self.store is not None
            self.waiter = self.store.waiter()
        return self.waiter

    def listening(self, on: bool) -> None:
        """Whether this connection hears the store's routing announcements (its
        waiter's LISTEN is up and not quiet); the routing cache polls when none does."""
        if on != self._listening:
            self._listening = on
            self.routing.listening(+1 if on else -1)

    # ------------------------------------------------------------ the store
    def db_now(self) -> float:
        """Now on the database's clock, which stamps due times and deadlines."""
        return self.store.now() if self.store is not None else time.time()

    def store_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions that mean this connection's database was lost."""
        return self.store.connection_errors if self.store is not None else self.connection_errors

    def usable(self, answer: Any) -> bool:
        """Whether an answer from the claims connection is one to act on: not after a
        lost connection (the claims in flight report it); any other error raises."""
        if isinstance(answer, self.store_errors()):
            return False
        if isinstance(answer, BaseException):
            raise answer
        return True

    def loop_claims(self) -> Any:
        """The claims session, if there is one and the caller runs in the event loop's
        thread; else None. Only for what a session alone can do (hand-off offers); every
        other operation goes through :meth:`claims_here`."""
        return self.claims if self.in_loop_thread() else None

    def claims_here(self) -> Any:
        """The claims interface for the caller (one spelling for every loop operation):
        the claims session in the event loop's thread, pipelined and answered later;
        elsewhere, or on an engine without one, the store at once (:class:`ImmediateClaims`).
        None once the connection is closed."""
        session = self.loop_claims()
        if session is not None:
            return session
        return ImmediateClaims(self.store) if self.store is not None else None

    def hand_back(self, deliveries: list[Delivery]) -> None:
        """Return claimed, undelivered jobs to pending, their attempt refunded (the one
        hand-back): pipelined from the event loop's thread, elsewhere at once. Through a
        lost connection this only logs: the claims lapse by themselves."""
        claims = self.claims_here()
        if not deliveries or claims is None:
            return
        try:
            claims.release(deliveries, self._handed_back)
        except self.store_errors() as exc:
            self._handed_back(exc)

    def _handed_back(self, outcome: set[int] | BaseException) -> None:
        if not self.usable(outcome):
            logger.warning(
                "alkstore: could not hand back messages (%r); their claims lapse by themselves",
                outcome,
            )


def linked(name: str) -> property:
    """A transport attribute that is the :class:`Link`'s field ``name`` (read and set)."""

    def get(self: Any) -> Any:
        return getattr(self.link, name)

    def set_(self: Any, value: Any) -> None:
        setattr(self.link, name, value)

    return property(get, set_, doc=f"The connection's {name} (``Link.{name}``).")
