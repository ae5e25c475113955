"""The kombu Transport: store connection, wake-ups, heartbeats, sweeps, event loop.

Inside a Celery worker (the hub), the wake-up source is registered with the event loop:
the PostgreSQL LISTEN socket as a reader, or on SQLite a short-interval change check, so
an idle worker issues no claims. Outside the hub, ``drain_events`` blocks on the same
source. A slow safety-net re-poll covers lost notifications.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Any

from kombu.transport import virtual

from ..errors import ConfigurationError
from ..maintenance import HANDOFF_CHECK, LEASE, Maintenance, Rotator
from ..store import (
    Rotation,
    Store,
    StoreURL,
    Waiter,
    acquire_store,
    connection_errors,
    release_store,
)
from ..store.options import parse_store_url
from ..tables.router import route_tables, unwrap
from .ackbuffer import AckBuffer
from .channel import Channel
from .declarations import Declarations
from .handoff import Handoff
from .heartbeat import MAX_SLEEP, Heartbeater
from .housekeeping import Housekeeper
from .link import Link, linked
from .options import parse_transport_options
from .quiet import QUIET_POLL, Quiet
from .reasons import install as _install_reasons
from .routing import RoutingCache
from .scheduling import ClaimScheduler

logger = logging.getLogger("kombu_alkstore")
_install_reasons()  # Celery's reasons for a reject, kept with the dead letter
#: Seconds without a change after which an SQLite worker checks less often.
IDLE_AFTER = 1.0


class Transport(virtual.Transport):
    """``alkstore+postgresql://…`` / ``alkstore+sqlite:///file.db`` broker transport."""

    Channel = Channel

    can_parse_url = True
    default_port = None
    driver_type = "alkstore"
    driver_name = "alkstore"
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"])
    )
    connection_errors = virtual.Transport.connection_errors + connection_errors()
    recoverable_connection_errors = connection_errors
    recoverable_channel_errors = ()

    # The connection's state its parts share (link.py): set here, read by them.
    store = linked("store")
    routing = linked("routing")
    #: In the event loop, on engines with a claims session: claims and acks that do
    #: not block it (``Store.session``).
    claims = linked("claims")
    loop = linked("loop")
    waiter = linked("waiter")
    #: Set once a connection error was seen: no hand-back through a dead link.
    lost = linked("lost")

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.link = Link(self.channels, self.connection_errors)
        self.store_url = self._parse_url(client.hostname)
        self.store_options, self.options = parse_transport_options(client.transport_options)
        self.polling_interval = self.options.polling_interval
        self.heartbeat_interval = (
            self.options.heartbeat_interval or self.store_options.visibility_timeout / 3.0
        )
        #: Idle channels offer their free slots to publishers (see handoff.py).
        self.handoff = Handoff(self.link, self.options.handoff)
        #: What to claim when: wake-ups, due times, the safety poll, backlogs.
        self.scheduler = ClaimScheduler(self.link, self.handoff)
        #: A busy connection stops hearing announcements of new jobs (see quiet.py).
        self.quiet = Quiet(self.link, self.scheduler, self.handoff)
        self.scheduler.answered.append(self.quiet.claimed)
        #: Expiry, retention and the other maintenance jobs, under a lease.
        self.maintenance = Maintenance(self.options.sweep_interval)
        #: Every message this connection holds unacked, by delivery tag. After a lost
        #: connection they are neither handed back nor heartbeated any more: a task still
        #: running can ack late within its deadline, the rest come back after one
        #: visibility timeout.
        self.held: dict[str, Any] = {}
        self.acks = AckBuffer(
            self.link,
            self.options.ack_flush_interval,
            self.store_url,
            self.store_options,
            lambda store: route_tables(store, self.options.tables),
        )
        #: Queue declarations made recently by this connection (see Channel._new_queue).
        self.declared: dict[tuple, float] = {}
        #: Every queue this connection declared, with its bindings (declarations.py).
        self.declarations = Declarations()
        #: Queues declared auto_delete without x-expires, by name: their message TTL in
        #: seconds (see Channel._queue_bind).
        self.auto_delete: dict[str, float | None] = {}
        #: Extends the held claims from its own thread (see heartbeat.py).
        self.heartbeats = Heartbeater(self.link, self.held, self.acks, self.heartbeat_interval)
        #: Queue refreshes and maintenance rounds, from their own thread (housekeeping.py).
        self.housekeeper = Housekeeper(self.sweep, self.options.sweep_interval)
        #: The lease holder's rotation of jobs' generations (maintenance/rotator.py).
        self.rotator = Rotator(self._rotate, self.options.sweep_interval)
        #: When the rotation thread last checked the hand-off's gate (monotonic clock).
        self._handoff_checked = 0.0
        #: When the event loop last refreshed and took the lease on the claims connection.
        self._loop_swept = 0.0
        #: The loop took the lease: the housekeeping thread runs the round.
        self._round_due = False
        self._trefs: list[Any] = []
        self._tick: Any = None
        self._check_tref: Any = None
        self._last_change = time.monotonic()

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The broker URL for display (Celery's banner, Flower): ``alkstore+`` and the
        database URL, password masked unless asked for; several hosts are kept."""
        url = parse_store_url(uri).url
        return f"alkstore+{url.render_as_string(hide_password=not include_password)}"

    @staticmethod
    def _parse_url(hostname: str | None) -> StoreURL:
        if not hostname or "://" not in hostname:
            raise ConfigurationError(
                f"broker URL {hostname!r} has no database URL: use alkstore+postgresql://… "
                "or alkstore+sqlite:///file.db"
            )
        return parse_store_url(hostname)

    # -------------------------------------------------------------- connection
    def establish_connection(self) -> Any:
        if self.store is None:
            store = acquire_store(self.store_url, self.store_options)
            self.routing = RoutingCache.for_store(store)
            if self.options.limits:  # written by every connection that carries them
                store.apply_limits(self.options.limits)
            if self.options.rates:
                store.apply_rates(self.options.rates)
            if self.options.fair:
                store.apply_fair(self.options.fair)
            try:  # table queues: checked against their tables, refused naming a column
                self.store = route_tables(store, self.options.tables)
            except BaseException:
                release_store(store)
                raise
        try:
            self.store.ping()  # reusing an open store must still prove the database is up
        except self.connection_errors:
            self.lost = True
            raise
        return super().establish_connection()

    def _waiter(self) -> Waiter:
        return self.link.open_waiter()

    def close_connection(self, connection: Any) -> None:
        self._cancel_timers()  # answers of claims and acks in flight are awaited first
        self.acks.flush()
        super().close_connection(connection)
        self.heartbeats.stop()
        self.housekeeper.stop()
        self.rotator.stop()
        if self.waiter is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                self.link.hand_back([d for _, d in self.waiter.retire()])
            with contextlib.suppress(Exception):
                self.waiter.close()
            self.waiter = None
        if self.store is not None:
            with contextlib.suppress(Exception):  # the lease lapses by itself otherwise
                self.maintenance.release(self.store)
            try:
                self.store.flush_publishes()
            except Exception as exc:  # closing must not raise; they stay queued to re-send
                logger.warning("alkstore: publishes not confirmed at close: %r", exc)
            release_store(unwrap(self.store))
            self.store = None

    def _collect(self, connection: Any) -> None:
        """The connection was lost: unacked claims stay held (a late ack may still land)
        and otherwise lapse by themselves; nothing is restored through a dead link."""
        self._end_claims(wait=False)
        self._cancel_timers()
        self.heartbeats.stop()
        self.housekeeper.stop()
        self.rotator.stop()
        for channel in list(self.channels):
            channel.do_restore = False
        if self.waiter is not None:
            with contextlib.suppress(Exception):
                self.waiter.close()  # its lock goes with it: publishers skip its offers
        self.waiter = None

    def _cancel_timers(self) -> None:
        self._end_claims(wait=not self.lost)
        for tref in self._trefs:
            tref.cancel()
        self._trefs.clear()
        if self._check_tref is not None:
            self._check_tref.cancel()
            self._check_tref = None
        loop = self.loop
        if loop is not None:
            loop.on_tick.discard(self._tick)
            self.link.attach(None)
            self.link.listening(False)
            if self.quiet.active and self.waiter is not None and not self.lost:
                with contextlib.suppress(Exception):  # a new waiter hears everything anyway
                    self.waiter.hear_wakeups(True)
            self.quiet.reset()
            fd = self.waiter.fileno() if self.waiter is not None else None
            if fd is not None:
                loop.remove(fd)

    def _end_claims(self, wait: bool) -> None:
        """Stop sending claims and acks without blocking; with ``wait``, take the
        answers of those in flight first (claims whose consumer is gone are handed back)."""
        claims, self.claims = self.claims, None
        if claims is None:
            return
        self.heartbeats.loop_beats = False  # its thread beats on its own now
        if self.store is not None:
            self.store.rates_tally.hand_over(False)  # its thread writes what is left
        if self.loop is not None:
            self.loop.remove(claims.fileno())
        try:
            if wait:
                claims.wait()
        except Exception as exc:  # closing must not raise; the claims lapse by themselves
            logger.warning("alkstore: claims or acks in flight not answered: %r", exc)
        try:
            claims.close()  # what is still in flight fails; its callbacks say so
        except Exception as exc:
            logger.debug("alkstore: claims closed with statements in flight: %r", exc)

    # -------------------------------------------------------------- event loop
    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self._cancel_timers()
        self.link.attach(loop)
        waiter = self._waiter()
        fd = waiter.fileno()
        if fd is not None:
            loop.add_reader(fd, self.guarded(self.on_readable))
            self.link.listening(True)
        else:
            self._last_change = time.monotonic()
            self._check_tref = loop.call_later(
                self.options.sqlite_poll_interval, self.guarded(self._check_changes)
            )
        if self.options.async_claims and self.store.capabilities.session:
            self.claims = self.store.session()
            loop.add_reader(self.claims.fileno(), self.guarded(self.claims.on_readable))
            # The rate counts go on this connection too, not on a pooled one.
            self.store.rates_tally.hand_over(True)
            tally = self.store.rates_tally
            self._trefs += [
                loop.call_repeatedly(tally.interval, self.guarded(self._write_rates)),
                loop.call_repeatedly(MAX_SLEEP, self.guarded(self.heartbeats.loop_beat)),
            ]
            self.heartbeats.loop_beats = True
            if fd is not None:
                self._trefs.append(loop.call_repeatedly(QUIET_POLL, self.guarded(self.quiet.tick)))
        if self.claims is not None:
            # Refresh and lease on the claims connection, cheap and in send order; the
            # round, which may be slow, goes to the housekeeping thread (see sweep). The
            # first at once: the holder's rotations of jobs' generations start after it.
            self._loop_swept = time.monotonic()
            self._trefs.append(
                loop.call_repeatedly(self.options.sweep_interval, self.guarded(self._loop_sweep))
            )
            loop.call_soon(self.guarded(self._loop_sweep))
        self._trefs += [
            loop.call_repeatedly(self.polling_interval, self.guarded(self.scheduler.safety_poll)),
        ]
        self.housekeeper.ensure_started()
        self._tick = self.guarded(self._on_tick)
        loop.on_tick.add(self._tick)
        loop.call_soon(self.guarded(self.scheduler.start))

    def guarded(self, fn: Any) -> Any:
        """``fn`` for the event loop: a connection error marks this connection lost
        (``Link.guarded``)."""
        return self.link.guarded(fn)

    def _check_changes(self) -> None:
        """SQLite: look for others' commits; every ``sqlite_poll_interval`` while work
        comes, every ``sqlite_idle_poll_interval`` after a second without any."""
        self._check_tref = None
        try:
            if self.on_readable():
                self._last_change = time.monotonic()
        finally:
            if self.loop is not None:
                o = self.options
                idle = time.monotonic() - self._last_change > IDLE_AFTER
                interval = o.sqlite_idle_poll_interval if idle else o.sqlite_poll_interval
                self._check_tref = self.loop.call_later(interval, self.guarded(self._check_changes))

    def on_readable(self, *args: Any) -> bool:
        """Read the waiter (``ClaimScheduler.read_wakeups``); True if anything came, and
        then the rotations, if this is the lease holder's and idle, resume."""
        if self.scheduler.read_wakeups():
            self.rotator.nudge()
            return True
        return False

    def _on_tick(self) -> None:
        # A full batch means more may be waiting: claim again once acks free capacity.
        self.scheduler.claim_starved()
        self.handoff.update_idle()

    def _write_rates(self) -> None:
        """The rate counts of this process, on the claims connection (see RateTally)."""
        if self.claims is not None:
            rows, trim_before = self.store.rates_tally.take()
            self.claims.write_rates(rows, trim_before, self._rates_written)

    @staticmethod
    def _rates_written(outcome: None | BaseException) -> None:
        if isinstance(outcome, BaseException):  # counting must never break the worker
            logger.debug("alkstore: rate counts not written: %s", outcome)

    # ------------------------------------------------------------ maintenance
    def sweep(self) -> None:
        """Keep our queues alive (``x-expires``), then a maintenance round if this
        connection holds the lease (see kombu_alkstore.maintenance). Blocking, on pooled
        connections, never the claims connection: the housekeeping thread calls it.

        Where an event loop refreshes and takes the lease on its claims connection
        (:meth:`_loop_sweep`), only the round it asked for runs here; if the loop has not
        done it for two intervals (a solo task blocks it), everything runs here."""
        store = self.store
        if store is None or self.lost or store.closed:
            return
        if self._round_due:
            self._round_due = False
            self._start_rotation(store)
            self.maintenance.round(store)
            return
        if self.claims is not None and (
            time.monotonic() - self._loop_swept < 2 * self.options.sweep_interval
        ):
            return
        names = sorted(self.scheduler.active_queues())
        self._refreshed(store, names, store.touch_queues(names))
        store.measure_clock()  # this host's clock may drift from the database's
        if self.maintenance.run(store) is not None:
            self._start_rotation(store)

    def _start_rotation(self, store: Store) -> None:
        """The lease holder rotates jobs' generations where the engine keeps them."""
        if store.capabilities.generations:
            self.rotator.ensure_started()

    def _rotate(self) -> Rotation | None:
        """One rotation, from the rotation thread, while this transport holds the lease
        (None otherwise: another worker's holder rotates)."""
        store = self.store
        if store is None or self.lost or store.closed or not self.maintenance.holds:
            return None
        done = store.rotate_generation()
        now = time.monotonic()
        if now >= self._handoff_checked + HANDOFF_CHECK:
            self._handoff_checked = now
            if store.reopen_handoff():
                logger.debug("alkstore: offers past the hand-off's gate, vacuumed")
        return done

    def _loop_sweep(self) -> None:
        """The event loop's sweep, on the claims connection, answered later: refresh its
        queues (declaring again any that were dropped) and take or renew the lease; the
        holder's round is left to the housekeeping thread."""
        claims = self.link.loop_claims()
        if claims is None or self.lost:
            return
        self._loop_swept = time.monotonic()
        names = sorted(self.scheduler.active_queues())
        if names:
            claims.touch_queues(names, functools.partial(self._touched, names))
        m = self.maintenance
        claims.lease_acquire(
            LEASE, m.owner, m.ttl, functools.partial(self._lease_answered, time.monotonic())
        )

    def _touched(self, names: list[str], touched: set[str] | BaseException) -> None:
        if self.link.usable(touched) and self.store is not None:
            self._refreshed(self.store, names, touched)

    def _refreshed(self, store: Store, names: list[str], touched: set[str]) -> None:
        """After a refresh of ``names`` that found ``touched``: declare again the queues
        this connection declared that were dropped meanwhile (see declarations.py)."""
        gone = [name for name in names if name not in touched]
        if gone and self.declarations.declare_again(store, gone):
            self.routing.invalidate()

    def _lease_answered(self, asked: float, held: bool | BaseException) -> None:
        if self.link.usable(held) and held:
            self.maintenance.took(asked)
            self._round_due = True
            self.housekeeper.wake()

    def _maintain(self) -> None:
        """A consumer without an event loop sweeps from the housekeeping thread too."""
        self.housekeeper.ensure_started()

    # ------------------------------------------------------------ no event loop
    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver one message, blocking on the wake-up source (not a sleep loop) until
        one comes; ``TimeoutError`` after ``timeout`` seconds without one.

        One per call, as an AMQP broker's drain delivers one: the rest of a claimed batch
        stays held (so heartbeated) and the next calls deliver it, without a statement,
        before the channel claims again. Celery before 5.7 drains once before it looks
        at the results already delivered: when a drain delivered a whole batch, each
        later ``result.get()`` waited for a drain to time out (1 s; 20 ``delay()`` then
        their ``get()``: 14-18 s). A call never returns without a message (kombu's
        mailbox and ``eventloop`` count calls as messages).
        """
        return self.guarded(self._drain)(timeout)

    def _drain(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = self._waiter()
        plan = self.scheduler
        learn = not plan.learned
        while True:
            self._maintain()
            if any(ch.deliver_undelivered() for ch in self.channels):
                return
            if plan.poll_all(at_most=1):
                return
            if plan.next_at is not None and plan.next_at <= self.link.db_now():
                # The delayed job it waited for fell due and the claim above looked for
                # it: forget that time (waits bounded by it would not block) and learn
                # the next one of our queues.
                plan.next_at = None
                learn = True
            if learn:
                plan.learned = True
                plan.learn_next_due()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError()
            # Not bounded by the sweep: the housekeeping thread sweeps (a sweep running
            # late made this 0, a spin until it ran).
            wait = self.polling_interval
            if deadline is not None:
                wait = min(wait, deadline - now)
            if plan.next_at is not None:
                wait = min(wait, max(plan.next_at - self.link.db_now(), 0))
            wake = waiter.wait(max(wait, 0))
            lapsed = self.handoff.take(wake)
            if lapsed:
                plan.poll_if_due(lapsed)
            learn = bool(wake) and not self.store.capabilities.listener
            if wake.routing:
                self.routing.invalidate()
            if wake.next_at is not None:
                plan.remember_next_at(wake.next_at)
