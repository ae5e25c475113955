"""The kombu Transport: store connection, wake-ups, heartbeats, sweeps, event loop.

Inside a Celery worker (the hub), the wake-up source is registered with the event loop:
the PostgreSQL LISTEN socket as a reader, or on SQLite a short-interval change check, so
an idle worker issues no claims. Outside the hub, ``drain_events`` blocks on the same
source. A slow safety-net re-poll covers lost notifications.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Container
from typing import Any

from kombu.transport import virtual

from ..errors import ConfigurationError
from ..maintenance import Maintenance
from ..store import Store, StoreURL, Waiter, acquire_store, connection_errors, release_store
from ..store.options import parse_store_url
from .channel import Channel
from .handoff import Handoff
from .heartbeat import MAX_SLEEP, Heartbeater
from .held import hand_back, tag_of
from .options import parse_transport_options
from .quiet import QUIET_POLL, Quiet
from .reasons import install as _install_reasons
from .routing import RoutingCache

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

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.store_url = self._parse_url(client.hostname)
        self.store_options, self.options = parse_transport_options(client.transport_options)
        self.polling_interval = self.options.polling_interval
        self.heartbeat_interval = (
            self.options.heartbeat_interval or self.store_options.visibility_timeout / 3.0
        )
        self.store: Store | None = None
        self.routing: RoutingCache | None = None
        self.waiter: Waiter | None = None
        #: In the event loop, on engines with a claims session: claims and acks that do
        #: not block it (``Store.session``).
        self.claims: Any = None
        #: Idle channels offer their free slots to publishers (see handoff.py).
        self.handoff = Handoff(self)
        #: A busy connection stops hearing announcements of new jobs (see quiet.py).
        self.quiet = Quiet(self)
        #: Expiry, retention and the other maintenance jobs, under a lease.
        self.maintenance = Maintenance(self.options.sweep_interval)
        #: Every message this connection holds unacked, by delivery tag. After a lost
        #: connection they are neither handed back nor heartbeated any more: a task still
        #: running can ack late within its deadline, the rest come back after one
        #: visibility timeout.
        self.held: dict[str, Any] = {}
        #: Set once a connection error was seen: no hand-back through a dead link.
        self.lost = False
        self.acks = AckBuffer(self)
        #: Queue declarations made recently by this connection (see Channel._new_queue).
        self.declared: dict[tuple, float] = {}
        #: Queues declared auto_delete without x-expires, by name: their message TTL in
        #: seconds (see Channel._queue_bind).
        self.auto_delete: dict[str, float | None] = {}
        #: Channels that may have work left behind (a full batch, or no free slot).
        self._starved: set[Any] = set()
        self._next_at: float | None = None
        #: A due time was skipped while claims were in flight: learn it once answered.
        self._relearn = False
        self._learned = False
        self._last_sweep = time.monotonic()
        #: Extends the held claims from its own thread (see heartbeat.py).
        self.heartbeats = Heartbeater(self.heartbeat, self.claims_held, self.heartbeat_interval)
        self._trefs: list[Any] = []
        self._loop: Any = None
        self._listening = False
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
            self.store = acquire_store(self.store_url, self.store_options)
            self.routing = RoutingCache.for_store(self.store)
        try:
            self.store.ping()  # reusing an open store must still prove the database is up
        except self.connection_errors:
            self.lost = True
            raise
        return super().establish_connection()

    def _waiter(self) -> Waiter:
        if self.waiter is None:
            assert self.store is not None
            self.waiter = self.store.waiter()
        return self.waiter

    def close_connection(self, connection: Any) -> None:
        self._cancel_timers()  # answers of claims and acks in flight are awaited first
        self.acks.flush()
        super().close_connection(connection)
        self.heartbeats.stop()
        if self.waiter is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                hand_back(self.store, [d for _, d in self.waiter.retire()])
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
            release_store(self.store)
            self.store = None

    def _collect(self, connection: Any) -> None:
        """The connection was lost: unacked claims stay held (a late ack may still land)
        and otherwise lapse by themselves; nothing is restored through a dead link."""
        self._end_claims(wait=False)
        self._cancel_timers()
        self.heartbeats.stop()
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
        if self._loop is not None:
            self._loop.on_tick.discard(self._tick)
            self.acks.attach(None)
            self.listening(False)
            if self.quiet.active and self.waiter is not None and not self.lost:
                with contextlib.suppress(Exception):  # a new waiter hears everything anyway
                    self.waiter.hear_wakeups(True)
            self.quiet.reset()
            fd = self.waiter.fileno() if self.waiter is not None else None
            if fd is not None:
                self._loop.remove(fd)
            self._loop = None

    def _end_claims(self, wait: bool) -> None:
        """Stop sending claims and acks without blocking; with ``wait``, take the
        answers of those in flight first (claims whose consumer is gone are handed back)."""
        claims, self.claims = self.claims, None
        if claims is None:
            return
        self.heartbeats.loop_beats = False  # its thread beats on its own now
        if self.store is not None:
            self.store.rates_tally.hand_over(False)  # its thread writes what is left
        if self._loop is not None:
            self._loop.remove(claims.fileno())
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
        self._loop = loop
        self.acks.attach(loop)
        waiter = self._waiter()
        fd = waiter.fileno()
        if fd is not None:
            loop.add_reader(fd, self._guarded(self._on_readable))
            self.listening(True)
        else:
            self._last_change = time.monotonic()
            self._check_tref = loop.call_later(
                self.options.sqlite_poll_interval, self._guarded(self._check_changes)
            )
        if self.options.async_claims and self.store.capabilities.session:
            self.claims = self.store.session()
            loop.add_reader(self.claims.fileno(), self._guarded(self.claims.on_readable))
            # The rate counts go on this connection too, not on a pooled one.
            self.store.rates_tally.hand_over(True)
            tally = self.store.rates_tally
            self._trefs += [
                loop.call_repeatedly(tally.interval, self._guarded(self._write_rates)),
                loop.call_repeatedly(MAX_SLEEP, self._guarded(self._loop_heartbeat)),
            ]
            self.heartbeats.loop_beats = True
            if fd is not None:
                self._trefs.append(loop.call_repeatedly(QUIET_POLL, self._guarded(self.quiet.tick)))
        self._trefs += [
            loop.call_repeatedly(self.polling_interval, self._guarded(self._safety_poll)),
            loop.call_repeatedly(self.options.sweep_interval, self._guarded(self.sweep)),
        ]
        self._tick = self._guarded(self._on_tick)
        loop.on_tick.add(self._tick)
        loop.call_soon(self._guarded(self._start_polling))

    def listening(self, on: bool) -> None:
        """Whether this connection hears the store's routing announcements (its
        waiter's LISTEN is up and not quiet); the routing cache polls when none does."""
        if on != self._listening:
            self._listening = on
            self.routing.listening(+1 if on else -1)

    def _guarded(self, fn: Any) -> Any:
        """``fn`` for the event loop: a connection error marks this connection lost (so
        closing it hands nothing back) and propagates, so Celery reconnects."""

        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except self.connection_errors:
                self.lost = True
                raise

        return call

    def _start_polling(self) -> None:
        self._poll_all()
        self._learn_next_due()

    def _check_changes(self) -> None:
        """SQLite: look for others' commits; every ``sqlite_poll_interval`` while work
        comes, every ``sqlite_idle_poll_interval`` after a second without any."""
        self._check_tref = None
        try:
            if self._on_readable():
                self._last_change = time.monotonic()
        finally:
            if self._loop is not None:
                o = self.options
                idle = time.monotonic() - self._last_change > IDLE_AFTER
                interval = o.sqlite_idle_poll_interval if idle else o.sqlite_poll_interval
                self._check_tref = self._loop.call_later(
                    interval, self._guarded(self._check_changes)
                )

    def _on_readable(self, *args: Any) -> bool:
        wake = self._waiter().poll()
        self.handoff.take(wake)
        if wake.routing:
            self.routing.invalidate()
        if wake.next_at is not None:
            self._schedule_at(wake.next_at)
        if wake.any:
            self._poll_all()
        elif wake.queues:
            self._poll_all(only=wake.queues)
        if wake and not self.store.capabilities.listener:
            self._learn_next_due()
        return bool(wake)

    def _on_tick(self) -> None:
        # A full batch means more may be waiting: claim again once acks free capacity.
        if self._starved:
            self._poll_all(batch=True, channels=list(self._starved))
        self.handoff.update_idle()

    def _learn_next_due(self) -> None:
        """Ask the store when the next delayed job is due: from the event loop's thread
        on the claims connection (no wait, no pooled connection), elsewhere at once."""
        queues = sorted(self._active_queues())
        if not queues or self.store is None:
            return
        claims = self.loop_claims()
        if claims is not None:
            claims.next_due(queues, self._next_due_answered)
        else:
            self._next_due_answered(self.store.next_due(queues))

    def _next_due_answered(self, when: float | None | BaseException) -> None:
        if not self._usable(when) or when is None:
            return
        if when <= time.time():
            if self._starved or any(ch.claiming for ch in self.channels):
                # A backlog: claims resume as slots free (see _on_tick). Or a claim in
                # flight, which may take this job: ask again once it is answered (see
                # on_batch), or later due times wait for the safety-net poll.
                self._relearn = True
                return
            when = time.time() + 0.005  # it fell due while we claimed: look again
        self._schedule_at(when)

    def _remember_next_at(self, when: float) -> bool:
        """Keep the earliest future due time; True if ``when`` became it."""
        if self._next_at is not None and time.time() < self._next_at <= when:
            return False
        self._next_at = when
        return True

    def _schedule_at(self, when: float) -> None:
        if self._remember_next_at(when) and self._loop is not None:
            self._loop.call_later(max(when - time.time(), 0) + 0.001, self._guarded(self._poll_due))

    def _safety_poll(self) -> None:
        """The slow re-poll behind the wake-ups: finds lapsed claims (which announce
        nothing) and anything a lost notification missed, with one read when idle."""
        self.poll_if_due(self._active_queues())

    def poll_if_due(self, queues: set[str]) -> None:
        """Claim on every channel if one of ``queues`` has due work (one read first)."""
        names = sorted(queues)
        if not names or self.store is None:
            return
        if self.claims is not None:
            self.claims.has_due(names, self._due_answered)
        elif self.store.has_due(names):
            self._poll_all()

    def store_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions that mean this connection's database was lost."""
        return self.store.connection_errors if self.store is not None else self.connection_errors

    def _usable(self, answer: Any) -> bool:
        """Whether an answer from the claims connection is one to act on: not after a
        lost connection (the claims in flight report it); any other error raises."""
        if isinstance(answer, self.store_errors()):
            return False
        if isinstance(answer, BaseException):
            raise answer
        return True

    def loop_claims(self) -> Any:
        """The claims session, if there is one and the caller runs in the event loop's
        thread (the only one that may use it); else None: use the store directly."""
        return self.claims if self.acks.in_loop_thread() else None

    def _write_rates(self) -> None:
        """The rate counts of this process, on the claims connection (see RateTally)."""
        if self.claims is not None:
            rows, trim_before = self.store.rates_tally.take()
            self.claims.write_rates(rows, trim_before, self._rates_written)

    @staticmethod
    def _rates_written(outcome: None | BaseException) -> None:
        if isinstance(outcome, BaseException):  # counting must never break the worker
            logger.debug("alkstore: rate counts not written: %s", outcome)

    def still_claimed(self, deliveries: list[Any], skip: Container[str] = ()) -> list[Any]:
        """``deliveries`` without those whose claims lapsed before they could be delivered
        (those of the queues in ``skip``, no-ack ones, are kept as they are).

        A claim read late (the event loop ran a task inline, solo, gevent or eventlet,
        while the claim's answer or its hand-off waited unread) may have lapsed, and its
        job may already run elsewhere. Those older than a third of their timeout (by this
        host's clock) are extended first, in one statement, and come back with their new
        deadline; the lapsed ones are dropped, and their queues claimed from again."""
        now = time.time()
        old = [
            d
            for d in deliveries
            if d.queue not in skip
            and d.visibility_timeout
            and d.deadline - now < d.visibility_timeout * 2 / 3
        ]
        if not old or self.store is None:
            return deliveries
        alive = self.store.heartbeat(old)
        lost = {d.id for d in old if d.id not in alive}
        if lost:
            logger.warning(
                "alkstore: %d message(s) claimed for this worker lapsed before it could "
                "take them (its event loop was busy): not delivered, claimed again",
                len(lost),
            )
            self.poll_if_due({d.queue for d in old if d.id in lost})
        extended = {d.id for d in old} - lost
        return [
            dataclasses.replace(d, deadline=now + d.visibility_timeout) if d.id in extended else d
            for d in deliveries
            if d.id not in lost
        ]

    def hand_back(self, deliveries: list[Any]) -> None:
        """Return claimed, undelivered jobs to pending, their attempt refunded: from the
        event loop's thread through the claims connection (no wait, no pooled
        connection), elsewhere at once (see held.hand_back)."""
        if not deliveries:
            return
        claims = self.loop_claims()
        if claims is not None:
            claims.release(deliveries, self._handed_back)
        else:
            hand_back(self.store, deliveries)

    def _handed_back(self, outcome: set[int] | BaseException) -> None:
        if not self._usable(outcome):
            logger.warning(
                "alkstore: could not hand back messages (%r); their claims lapse by themselves",
                outcome,
            )

    def _due_answered(self, due: bool | BaseException) -> None:
        if self._usable(due) and due:
            self._poll_all()

    def _poll_due(self) -> None:
        """A delayed job fell due: claim it, then learn when the next one is due."""
        self._next_at = None
        self._poll_all()
        self._learn_next_due()

    def _active_queues(self) -> set[str]:
        return {q for ch in self.channels for q in ch._active_queues}

    def on_batch(self, channel: Any, full: bool) -> None:
        """Called by a channel after each claim; a full batch leaves work behind."""
        if full:
            self._starved.add(channel)
        else:
            self._starved.discard(channel)
        if self._relearn and not self._starved and not any(c.claiming for c in self.channels):
            self._relearn = False
            self._learn_next_due()

    def _poll_all(
        self,
        batch: bool = False,
        channels: list[Any] | None = None,
        only: set[str] | None = None,
    ) -> bool:
        """Claim and deliver one batch on each consuming channel; True if any delivered.

        ``channels`` limits the channels, ``only`` to those consuming one of these
        queues (the ones a wake-up named). With ``batch``, a channel claims only once
        half its prefetch slots are free.
        """
        delivered = False
        chosen = channels if channels is not None else list(self.channels)
        # Control channels (no-ack consumers: the pidbox, replies) first: a revoke that
        # waits beside the task it names reaches the worker before that task does.
        chosen.sort(key=lambda ch: not ch._no_ack_queues)
        for channel in chosen:
            if not channel._consumers or (only and not only.intersection(channel._active_queues)):
                self._starved.discard(channel)
                continue
            if not channel.qos.can_consume() or (batch and not channel.wants_batch()):
                self._starved.add(channel)
                if not batch:  # woken for due work (or the safety poll found some)
                    self.handoff.behind(channel)
                continue
            self._starved.discard(channel)
            if self.claims is not None:
                channel.request_claim(self.claims)
                continue
            try:
                channel._get_many(channel._active_queues)
                delivered = True
            except virtual.Empty:
                pass
        return delivered

    # ------------------------------------------------------------ maintenance
    def claims_held(self) -> list[Any]:
        """The claims heartbeats keep: the messages held unacked, and those Celery acked
        whose ack is not sent yet (an inline pool can block the loop, and so the flush,
        for as long as its next task runs)."""
        return list(self.held.values()) + self.acks.waiting()

    def heartbeat(self) -> None:
        """Extend the deadlines of every held message in one statement, each by its own
        visibility timeout (called by the heartbeat thread; safe from any thread)."""
        held = self.claims_held()
        store = self.store
        if not held or store is None or self.lost:
            return
        try:
            alive: set[int] | BaseException = store.heartbeat(held)
        except Exception as exc:
            alive = exc
        self._beat_answered(held, alive)

    def _loop_heartbeat(self) -> None:
        """The heartbeat from the event loop, on the claims connection, when it is due
        (never while nothing is held: see Heartbeater.take_due)."""
        if self.claims is not None and not self.lost and self.heartbeats.take_due():
            held = self.claims_held()
            self.claims.heartbeat(held, functools.partial(self._beat_answered, held))

    def _beat_answered(self, held: list[Any], alive: set[int] | BaseException) -> None:
        if isinstance(alive, BaseException):
            logger.warning(
                "alkstore: heartbeat failed (%r); the claims hold until their "
                "deadlines and the next beat retries",
                alive,
            )
            return
        for d in held:
            if d.id not in alive and self.held.pop(tag_of(d), None) is not None:
                logger.warning(
                    "alkstore: lost the claim on message %s on %r (its visibility timeout "
                    "of %s s lapsed); it will be delivered again and this ack will be refused",
                    d.id,
                    d.queue,
                    d.visibility_timeout,
                )

    def sweep(self) -> None:
        """Keep our queues alive (``x-expires``), then a maintenance round if this
        connection holds the lease (see kombu_alkstore.maintenance)."""
        self._last_sweep = time.monotonic()
        if self.store is None:
            return
        queues = sorted(self._active_queues())
        claims = self.loop_claims()
        if claims is not None:
            claims.touch_queues(queues, self._usable)
            self.maintenance.send(claims, self._usable)
            return
        self.store.touch_queues(queues)
        self.maintenance.run(self.store)

    def _maintain(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep >= self.options.sweep_interval:
            self.sweep()

    # ------------------------------------------------------------ no event loop
    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver one batch, blocking on the wake-up source (not a sleep loop)."""
        return self._guarded(self._drain)(timeout)

    def _drain(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = self._waiter()
        learn = not self._learned
        while True:
            self._maintain()
            if self._poll_all():
                return
            if learn:
                self._learned = True
                self._learn_next_due()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError()
            wait = min(
                self.polling_interval,
                self.options.sweep_interval - (now - self._last_sweep),
            )
            if deadline is not None:
                wait = min(wait, deadline - now)
            if self._next_at is not None:
                wait = min(wait, max(self._next_at - time.time(), 0))
            wake = waiter.wait(max(wait, 0))
            self.handoff.take(wake)
            learn = bool(wake) and not self.store.capabilities.listener
            if wake.routing:
                self.routing.invalidate()
            if wake.next_at is not None:
                self._remember_next_at(wake.next_at)


class AckBuffer:
    """Acks batched into one statement, flushed within ``ack_flush_interval``.

    Celery counts a message done once it acks; an ack not yet flushed when the process
    dies is not lost silently: its claim lapses and the message is delivered again
    (at-least-once). Outside the event loop's thread, acks are applied at once.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._loop: Any = None
        self._loop_thread: int | None = None
        self._scheduled = False

    def attach(self, loop: Any) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident() if loop is not None else None

    def add(self, delivery: Any) -> None:
        with self._lock:
            self._pending.append(delivery)
            deferred = self.in_loop_thread()
            if deferred and not self._scheduled:
                self._scheduled = True
                self._loop.call_later(
                    self.transport.options.ack_flush_interval, self.transport._guarded(self.flush)
                )
        if not deferred:
            self.flush()

    def waiting(self) -> list[Any]:
        """The claims whose acks wait here to be sent."""
        with self._lock:
            return list(self._pending)

    def in_loop_thread(self) -> bool:
        """Whether the caller runs in the event loop's thread (the only one that may use
        the transport's claims connection)."""
        return self._loop is not None and threading.get_ident() == self._loop_thread

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        if not batch:
            return
        t = self.transport
        claims = t.loop_claims()
        if claims is not None:
            claims.ack(batch, lambda landed: self._landed(batch, landed))
        elif t.store is not None:
            self._landed(batch, t.store.ack(batch))
        else:  # a late ack (acks_late) after this connection closed: the claim still holds
            store = acquire_store(t.store_url, t.store_options)
            try:
                self._landed(batch, store.ack(batch))
            finally:
                release_store(store)

    @staticmethod
    def _landed(batch: list[Any], landed: set[int] | BaseException) -> None:
        if isinstance(landed, BaseException):
            logger.warning(
                "alkstore: %d ack(s) may not have landed (%r); a message whose ack did not "
                "land is delivered again after its visibility timeout",
                len(batch),
                landed,
            )
            raise landed
        for d in batch:
            if d.id not in landed:
                # The timeout its publisher stamped, named: a storm of claims lapsing at
                # once (a timeout of milliseconds) explains itself in the worker's log.
                logger.warning(
                    "alkstore: ack of message %s on %r refused: its claim lapsed "
                    "(visibility timeout %s s) and it will be delivered again",
                    d.id,
                    d.queue,
                    d.visibility_timeout,
                )
