"""Wake-ups and hand-offs: a consumer's LISTEN connection."""

from __future__ import annotations

import contextlib
import json
import os
import select
import weakref
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ..options import parse_store_url
from ..values import Delivery
from ..waiter import Waiter, Wakeup
from . import handoff

if TYPE_CHECKING:
    from .store import PostgresStore

_waiters: weakref.WeakSet[PostgresWaiter] = weakref.WeakSet()


def close_all_waiters() -> None:
    """Close every LISTEN connection of this process (see ``close_all_stores``)."""
    for waiter in list(_waiters):
        with contextlib.suppress(Exception):
            waiter.close()


class PostgresWaiter(Waiter):
    """A dedicated autocommit connection LISTENing on the store's channel.

    Wake-ups on the store's channel are ``[run_at, queue]`` (JSON) or ``"routing"``.
    While it hears them it holds the hearing locks (``waiter_hear``): a publish made
    while no waiter holds them announces nothing (``unheard`` in queries.sql).
    It also takes hand-offs: while it lives its backend holds the advisory lock
    ``(lockspace, pid)``, which tells publishers its offers (rows in ``offers`` under its
    pid, its :attr:`address`) are live, and it LISTENs on its own channel, where a
    publisher sends a job it handed to one of its channels (see :mod:`.handoff`).
    """

    def __init__(self, store: PostgresStore) -> None:
        direct = store.options.listen_url
        conninfo = parse_store_url(direct).conninfo if direct else store.url.conninfo
        self._conn = psycopg.connect(conninfo, autocommit=True, row_factory=dict_row)
        _waiters.add(self)
        self._store = store
        self._statements = store.statements
        self._owner = os.getpid()
        me = self._run("waiter_start").fetchone()
        self._pid: int = me["pid"]
        self._handoff_channel: str = me["handoff_channel"]
        self._run("waiter_hear")  # publishes announce their jobs from here (see hear_wakeups)
        self._listen(self._statements.channel)
        self._run("waiter_lock", {"pid": self._pid})
        self._listen(self._handoff_channel)
        # Offers left by an earlier backend with the same pid are not ours.
        self._run("withdraw_offers", {"pid": self._pid})
        # What was announced before this LISTEN (a reconnect) went unheard: claims
        # start from the head again (floors.py).
        store.floors.reset()

    def _run(self, key: str, params: dict | None = None) -> psycopg.Cursor:
        statements = self._statements
        return self._conn.execute(statements.sql[key], statements.params(params))

    def _listen(self, channel: str, on: bool = True) -> None:
        # LISTEN takes no parameter: the channel is quoted as an identifier.
        verb = sql.SQL("LISTEN" if on else "UNLISTEN")
        self._conn.execute(sql.SQL("{} {}").format(verb, sql.Identifier(channel)))

    def hear_wakeups(self, on: bool) -> bool:
        # LISTEN takes effect at its commit (autocommit: on return); notifications read
        # during the round trip wait in the connection for the next poll().
        if on:
            # The hearing locks wait for the publishes that found none hearing. What
            # committed before the LISTEN is found by the claim the caller makes next
            # (announced or not); what commits after it is announced.
            self._run("waiter_hear")
            self._listen(self._statements.channel)
            # What was announced (or not) while not listening went unheard (floors.py).
            self._store.floors.reset()
        else:
            self._run("waiter_deaf")
            self._listen(self._statements.channel, False)
        return True

    @property
    def address(self) -> int:
        """The LISTEN backend's pid: offers are made under it, hand-offs sent to it."""
        return self._pid

    def fileno(self) -> int | None:
        return self._conn.fileno()

    def _collect(self, timeout: float) -> Wakeup:
        wake = Wakeup()
        now = self._store.now()  # due times are the database's
        for note in self._conn.notifies(timeout=timeout, stop_after=None if timeout == 0 else 1):
            if note.channel == self._handoff_channel:
                try:
                    wake.handoffs.append(handoff.decode(note.payload))
                except handoff.DECODE_ERRORS:
                    wake.any = True
                continue
            try:
                payload = json.loads(note.payload)
                if payload == "routing":
                    wake.routing = True
                    continue
                run_at, queue = payload
                # A job committed late or due in the past may be behind this process's
                # claim floor: the floor goes below it before the wake-up is acted on.
                self._store.floors.lower(queue, run_at)
            except (ValueError, TypeError):
                wake.any = True
                continue
            if run_at is None or run_at <= now + 0.001:
                wake.queues.add(queue)
            elif wake.next_at is None or run_at < wake.next_at:
                wake.next_at = run_at
        if timeout and wake:  # pick up the rest of a burst without blocking
            wake.merge(self._collect(0))
        return wake

    def poll(self) -> Wakeup:
        return self._collect(0)

    def wait(self, timeout: float) -> Wakeup:
        ready, _, _ = select.select([self._conn.fileno()], [], [], max(timeout, 0))
        return self._collect(0) if ready else Wakeup()

    def retire(self) -> list[tuple[int, Delivery]]:
        """Withdraw every offer of this waiter; return the jobs handed to it that arrived
        meanwhile (the caller hands them back)."""
        self._run("withdraw_offers", {"pid": self._pid})
        # A publisher that took an offer committed before the DELETE could: its
        # notification was sent before the DELETE's answer, so it is read here.
        return self._collect(0).handoffs

    def close(self) -> None:
        if os.getpid() == self._owner:
            self._conn.close()
