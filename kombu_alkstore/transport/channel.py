"""The kombu Channel over the store: publish, claim, ack, reject, restore, routing."""

from __future__ import annotations

import base64
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from ..errors import ConfigurationError
from ..store import Delivery
from . import reasons, revokes
from .envelope import to_job, to_message
from .held import hand_back, tag_of
from .late import still_claimed

logger = logging.getLogger("kombu_alkstore")

#: How long a queue declaration is remembered per connection (see ``_new_queue``).
DECLARE_CACHE_SECONDS = 5.0


def undecodable(message: Any) -> str | None:
    """Why a message the consumer acked could not be decoded, or None.

    Celery acks a task message whose body it cannot decode (after logging it); the
    transport turns that ack into a dead letter carrying the decode error.
    """
    if message is None:
        return None
    if message.errors:
        return f"undecodable message: {message.errors[0][1]!r}"
    if message._decoded_cache is None:
        try:
            message._decode()
        except Exception as exc:  # any decoder error means the body is unusable
            return f"undecodable message: {exc!r}"
    return None


def _millis(value: Any, name: str, queue: str) -> float | None:
    """A queue argument in milliseconds, or a clear error naming it."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"queue {queue!r}: argument {name} must be a number of milliseconds, got {value!r}"
        ) from None


class QoS(virtual.QoS):
    """Unacked messages go back as the SAME rows (attempt refunded), never as copies.

    Not after a lost connection: tasks may still be running (acks_late) and can ack late
    within their deadline; the other claims lapse after one visibility timeout.
    """

    def restore_unacked(self) -> list:
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        if self.channel.connection is not None and self.channel.connection.lost:
            return []
        return self.channel._release(tags)


class Channel(virtual.Channel):
    """A kombu channel on the store; its transport (``connection``) owns the wake-ups,
    the claims session and the hand-off offers (see :mod:`.handoff`)."""

    QoS = QoS
    supports_fanout = True

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.store = connection.store
        # Kept past close: Celery may ack after a reconnect through the old channel.
        self.held = connection.held
        self.acks = connection.acks
        self._no_ack_queues: set[str] = set()
        #: A claim sent without waiting (``ClaimScheduler.request_claim``) is not answered yet.
        self.claiming = False
        #: A wake-up came while it was in flight: claim again once it is answered.
        self.claim_again = False
        #: Outside an event loop (``drain_events``): the rest of a claimed batch, held
        #: and delivered one per call before this channel claims again.
        self._undelivered: deque[Delivery] = deque()
        self._undelivered_read_at = 0.0

    # ----------------------------------------------------------------- publish
    def _put(self, queue: str, message: dict, **kwargs: Any) -> None:
        self.store.publish([to_job(queue, message)])

    def _put_fanout(self, exchange: str, message: dict, routing_key: str, **kwargs: Any) -> None:
        revokes.record(self.store, exchange, message)  # a Celery revoke: made durable
        queues = sorted({q for _, _, q in self.get_table(exchange)})
        if queues:
            self.store.publish([to_job(q, message) for q in queues])

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> list[str]:
        found = super()._lookup(exchange, routing_key, default)
        if not found and self.typeof(exchange).type == "direct":
            # A reply queue (pidbox, rpc) bound by another process a moment ago: re-read
            # once. Fanout and topic exchanges with no queue bound are common (events).
            self.connection.routing.invalidate()
            found = super()._lookup(exchange, routing_key, default)
        return found

    # ----------------------------------------------------------------- routing
    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        return self.connection.routing.table(exchange)

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        type_ = self.connection.routing.type(exchange) if exchange else None
        return self.exchange_types[type_ or default]

    def exchange_declare(
        self,
        exchange: str | None = None,
        type: str = "direct",
        durable: bool = False,
        auto_delete: bool = False,
        arguments: Any = None,
        nowait: bool = False,
        passive: bool = False,
    ) -> None:
        type = type or "direct"
        exchange = exchange or f"amq.{type}"
        if passive:
            if self.connection.routing.type(exchange) is None:
                raise ChannelError(
                    f"NOT_FOUND - no exchange {exchange!r}",
                    (50, 10),
                    "Channel.exchange_declare",
                    "404",
                )
            return
        if self.connection.routing.type(exchange) != type:
            with self._declaring():
                self.store.exchange_declare(exchange, type)
            self.connection.routing.invalidate()

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        with self._declaring():
            self.store.exchange_delete(exchange)
        self.connection.routing.invalidate()

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        with self._declaring():
            self.store.bind(exchange, routing_key, queue)
            ttl = self.connection.auto_delete.pop(queue, False)
            if ttl is not False and self.typeof(exchange).type == "fanout":
                # An auto_delete queue on a fanout exchange (kombu's Broadcast: a queue
                # of its own per consumer, named anew at each start): dropped, binding
                # and all, once no consumer has used it for the expiry grace (the
                # shortest x-expires waits that long), as RabbitMQ drops it when its
                # consumer goes (a killed one included).
                self.store.queue_declare(queue, message_ttl=ttl, expires=1.0)
                self.connection.declarations.declared(queue, ttl, 1.0)
        self.connection.declarations.bound(queue, exchange, routing_key)
        self.connection.routing.invalidate()

    def queue_bind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        exchange = exchange or "amq.direct"
        self._queue_bind(exchange, routing_key, "", queue)

    def queue_unbind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        with self._declaring():
            self.store.unbind(exchange or "amq.direct", routing_key, queue)
        self.connection.declarations.unbound(queue, exchange or "amq.direct", routing_key)
        self.connection.routing.invalidate()

    # ------------------------------------------------------------------ queues
    def prepare_queue_arguments(self, arguments: Any, **kwargs: Any) -> dict:
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _new_queue(self, queue: str, arguments: dict | None = None, **kwargs: Any) -> None:
        args = arguments or {}
        ttl = _millis(args.get("x-message-ttl"), "x-message-ttl (message_ttl)", queue)
        expires = _millis(args.get("x-expires"), "x-expires (expires)", queue)
        if kwargs.get("auto_delete") and expires is None:
            self.connection.auto_delete[queue] = ttl / 1000.0 if ttl is not None else None
        key = (queue, ttl, expires)
        # Celery's rpc:// backend redeclares its reply queue on every send: one write
        # per queue and arguments per few seconds is enough to keep the row fresh.
        declared = self.connection.declared
        now = time.monotonic()
        if now - declared.get(key, -1e9) < DECLARE_CACHE_SECONDS:
            return
        message_ttl = ttl / 1000.0 if ttl is not None else None
        expires_s = expires / 1000.0 if expires is not None else None
        with self._declaring():
            self.store.queue_declare(queue, message_ttl=message_ttl, expires=expires_s)
        declared[key] = now
        self.connection.declarations.declared(queue, message_ttl, expires_s)

    def _declaring(self) -> contextlib.AbstractContextManager:
        """Declarations commit on their own, not with a caller's transaction (a rolled
        back publish must not leave kombu believing an exchange or binding exists).
        SQLite cannot: the caller's transaction holds the only write lock, so there they
        go through it (declare exchanges and queues at start-up, see the docs)."""
        return self.store.detached()

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return self.store.queue_exists(queue)

    def _size(self, queue: str) -> int:
        return self.store.size(queue)

    def _purge(self, queue: str) -> int:
        return self.store.purge(queue)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self.store.queue_delete(queue)

    def queue_delete(
        self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any
    ) -> None:
        if if_empty and self._size(queue):
            return
        with self._declaring():
            self.store.queue_delete(queue)
        self.connection.declared.clear()
        self.connection.declarations.deleted(queue)
        self.connection.routing.invalidate()

    def close(self) -> None:
        self.hand_back_undelivered()
        super().close()

    # ----------------------------------------------------------------- consume
    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack_queues.add(queue)
        else:
            self._no_ack_queues.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        if queue is not None:
            self.hand_back_undelivered(queue)
            self._no_ack_queues.discard(queue)
        try:
            return super().basic_cancel(consumer_tag)
        finally:
            if self.connection is not None:
                self.connection.handoff.update(self)  # not for the queue any more

    def free_slots(self) -> int:
        """Prefetch slots free now (capped like a claim's batch)."""
        return self.batch_size() if self.qos.can_consume() else 0

    def wants_batch(self) -> bool:
        """Enough free prefetch slots to make a claim worth a round trip (half of them),
        so a busy worker claims in batches rather than one message per finished task."""
        qos = self.qos
        if not qos.prefetch_count:
            return True
        free = qos.prefetch_count - (len(qos._delivered) - len(qos._dirty))
        return free >= max(1, qos.prefetch_count // 2)

    def batch_size(self) -> int:
        """How many jobs one claim of this channel takes: its free prefetch slots as
        kombu's QoS estimates them, capped by ``prefetch_max``."""
        cap = self.connection.options.prefetch_max
        estimate = self.qos.can_consume_max_estimate()
        return cap if estimate is None else max(1, min(estimate, cap))

    def deliver(self, deliveries: list[Delivery], at_most: int | None = None) -> None:
        """Deliver jobs claimed for this channel (by a claim, or handed off), in order:
        all, or ``at_most`` with the rest kept for :meth:`deliver_undelivered`. No-ack
        ones are acked first; the others are held (so heartbeated) before the first is
        delivered. The caller dropped those whose claims lapsed (``late.still_claimed``)."""
        no_ack = [d for d in deliveries if d.queue in self._no_ack_queues]
        if no_ack:
            self.store.ack(no_ack)
        self.hold(deliveries)
        # the claim just read the revoke marks
        self._deliver_held(deque(deliveries), time.monotonic(), at_most)

    def deliver_undelivered(self) -> bool:
        """Deliver the next message kept from a claimed batch (``deliver(at_most=...)``); True
        if one was. One whose claim was lost meanwhile (a failed heartbeat dropped it
        from ``held``, or it lapsed: see ``late.still_claimed``) is skipped."""
        while self._undelivered:
            d = self._undelivered.popleft()
            if d.queue not in self._no_ack_queues and tag_of(d) not in self.held:
                continue
            live, _ = still_claimed(self.connection.link, [d], self._no_ack_queues)
            if not live:  # its queue is claimed from again when this finds nothing
                self.unhold([d])
                continue
            rest, self._undelivered = self._undelivered, deque()
            rest.appendleft(live[0])
            self._deliver_held(rest, self._undelivered_read_at, 1)
            return True
        return False

    def _deliver_held(self, pending: deque[Delivery], read_at: float, at_most: int | None) -> None:
        """The one delivery loop (claims and hand-offs): deliver held claims in order,
        all, or ``at_most`` with the rest kept in ``_undelivered`` (still held, so
        heartbeated). One this channel cannot take now (closed, its queue no longer
        consumed, no free slot: a consumer cancelled or the prefetch shrank while
        earlier ones ran) goes back with its attempt refunded. A callback that raises:
        the rest go back untouched."""
        delivered = 0
        refused: list[Delivery] = []
        try:
            while pending and (at_most is None or delivered < at_most):
                d = pending.popleft()
                if not self._can_take(d):
                    self.unhold([d])
                    if d.queue not in self._no_ack_queues:  # no-ack ones were acked
                        refused.append(d)
                    continue
                tag = tag_of(d)
                message = self._decode_row(d)
                if message is None:
                    self.unhold([d])  # dead-lettered
                    continue
                if d.revoked:
                    revokes.tell_worker(d.msg_id)
                try:
                    self.connection._deliver(message, d.queue)
                    delivered += 1
                except Exception as exc:
                    # The consumer could not take it (e.g. a task body Celery cannot
                    # parse): dead-letter it rather than crash the worker on it forever.
                    self._refuse(d, tag, exc)
                read_at = revokes.recheck_if_stale(self.store, read_at, pending)
        except BaseException:
            self.unhold(pending)
            refused += [d for d in pending if d.queue not in self._no_ack_queues]
            raise
        finally:
            if refused:  # a callback raised mid-batch, or not takeable: back untouched
                self.hand_back(refused)
        if pending:  # only with at_most
            self._undelivered.extend(pending)
            self._undelivered_read_at = read_at

    def _can_take(self, d: Delivery) -> bool:
        """Whether this channel can take ``d`` now: open, still consuming its queue,
        and (unless no-ack) with a free prefetch slot."""
        if self.closed or self.connection is None or d.queue not in self._active_queues:
            return False
        return d.queue in self._no_ack_queues or self.qos.can_consume()

    def hand_back_undelivered(self, queue: str | None = None) -> None:
        """The claims kept undelivered (of ``queue``, or all) go back, attempts refunded:
        at close, or when their consumer is cancelled. No-ack ones were acked at their
        claim and are dropped, as a broker's prefetched no-ack messages are."""
        kept = [d for d in self._undelivered if queue is None or d.queue == queue]
        if not kept:
            return
        self._undelivered = deque(d for d in self._undelivered if d not in kept)
        self.unhold(kept)
        rest = [d for d in kept if d.queue not in self._no_ack_queues]
        if rest and self.connection is not None and not self.connection.lost:
            self.connection.link.hand_back(rest)

    def hand_back(self, deliveries: list[Delivery]) -> None:
        """Claimed, undelivered jobs back to pending: through the connection (its one
        hand-back) while there is one, else on the store at once."""
        if self.connection is not None:
            self.connection.link.hand_back(deliveries)
        else:
            hand_back(self.store, deliveries)

    def hold(self, deliveries: list[Delivery]) -> None:
        """Hold (so heartbeat) claims about to be delivered, all of them before the first
        is: an inline pool (solo, gevent, eventlet) runs each task inside ``_deliver``,
        and the claims waiting behind a long task must not lapse meanwhile."""
        for d in deliveries:
            if d.queue not in self._no_ack_queues:
                self.held[tag_of(d)] = d
        self.connection.heartbeats.ensure_started()

    def unhold(self, deliveries: Iterable[Delivery]) -> None:
        """Stop holding claims that will not be delivered here (handed back or dead)."""
        for d in deliveries:
            self.held.pop(tag_of(d), None)

    def _refuse(self, d: Delivery, tag: str, exc: Exception) -> None:
        logger.error(
            "alkstore: message %s on %r could not be delivered and is dead-lettered: %r",
            d.id,
            d.queue,
            exc,
        )
        if self.held.pop(tag, None) is not None:
            self.qos._delivered.pop(tag, None)
            self.store.fail([d], f"delivery failed: {exc!r}")

    def _decode_row(self, d: Delivery) -> dict | None:
        """The kombu message for a row; a row that is not one is dead-lettered."""
        try:
            message = to_message(d, self.store.clock_offset)
            if message["properties"].get("body_encoding") == "base64":
                base64.b64decode(message.get("body") or b"", validate=True)
            return message
        except Exception as exc:
            if d.queue not in self._no_ack_queues:
                self.store.fail([d], f"undecodable message: {exc!r}")
            logger.error("alkstore: message %s on %r is undecodable: %r", d.id, d.queue, exc)
            return None

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        for d in self.store.claim([queue], 1):
            payload = self._decode_row(d)
            if payload is None:
                continue
            message = self.Message(payload, channel=self)
            if no_ack:
                self.store.ack([d])
            else:
                self.hold([d])
                self.qos.append(message, message.delivery_tag)
            return message
        return None

    # ------------------------------------------------------------- ack, reject
    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        d = self.held.pop(delivery_tag, None)
        if d is not None:
            error = undecodable(self.qos._delivered.get(delivery_tag))
            if error:
                self.store.fail([d], error)
            else:
                self.acks.add(d)
        super().basic_ack(delivery_tag, multiple=multiple)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        d = self.held.pop(delivery_tag, None)
        if d is not None:
            if requeue:
                self.store.requeue([d])
            else:
                self.store.fail([d], reasons.take(d.msg_id))
        self.qos.reject(delivery_tag, requeue=False)

    def _release(self, tags: list[str]) -> list:
        held = [d for d in (self.held.pop(t, None) for t in tags) if d is not None]
        if held:
            self.hand_back(held)
        return []

    def _restore(self, message: Any) -> None:
        self._release([message.delivery_tag])

    _restore_at_beginning = _restore
