"""Queues that outlive their consumer on AMQP brokers only as long as they are used:
an auto_delete queue on a fanout exchange (kombu's ``Broadcast``, named anew at each
worker start) is dropped with its binding once unused for the expiry grace, so a
restarted worker's old one stops collecting every broadcast; other auto_delete queues
(rpc:// reply queues, whose clients may not consume all the time) are kept."""

from __future__ import annotations

import time

from kombu import Connection, Exchange, Queue
from kombu.common import Broadcast

import kombu_alkstore  # noqa: F401


def test_a_broadcast_queue_goes_once_unused_and_a_plain_auto_delete_one_stays(target):
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        bcast = Broadcast("bc")
        reply = Queue("reply-q", Exchange("replies", "direct"), "reply-q", auto_delete=True)
        consumer = conn.Consumer([bcast, reply], callbacks=[lambda body, message: None])
        with consumer, conn.Producer() as producer:
            producer.publish({"n": 1}, exchange="bc", declare=[Exchange("bc", "fanout")])
    with target.open(queue_expiry_grace=0) as store:
        assert store.queue_exists(bcast.name) and store.size(bcast.name) == 1
        time.sleep(1.2)  # unused for its (shortest) expiry, the grace being 0 here
        store.maintain_round()
        assert not store.queue_exists(bcast.name)  # its binding and message with it
        assert store.queue_exists("reply-q")
    # A later broadcast reaches no dropped queue.
    with (
        Connection(target.broker_url, transport_options=target.transport_options) as conn,
        conn.Producer() as producer,
    ):
        producer.publish({"n": 2}, exchange="bc", declare=[Exchange("bc", "fanout")])
    with target.open() as store:
        assert not store.queue_exists(bcast.name)
        assert [c.queue for c in store.counts() if c.pending] == []
