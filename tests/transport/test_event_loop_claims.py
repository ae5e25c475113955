"""The transport in a kombu event loop (the hub a Celery worker runs) on PostgreSQL:
claims sent without waiting are delivered when answered, a wake-up during a claim in
flight is not lost, a claim answered after its consumer left is handed back (not
delivered, not dead-lettered), a late ack after its connection closed still lands, and
a refused late ack names the timeout its job carried."""

from __future__ import annotations

import select
import time

import pytest
from kombu import Connection, Queue

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)
from tests.helpers import consumer_in_hub, run_until


@pytest.fixture
def hub_connection(pg_target):
    with Connection(pg_target.broker_url, transport_options=pg_target.transport_options) as c:
        queue = Queue("q", routing_key="q")
        with c.Producer() as producer:
            for i in range(5):
                producer.publish({"i": i}, routing_key="q", declare=[queue])
    with consumer_in_hub(pg_target) as hub_consumer:
        yield hub_consumer


def _counts(pg_target):
    store = pg_target.open()
    try:
        [counts] = store.counts(["q"])
        return counts.pending, counts.processing, counts.dead
    finally:
        store.close()


def test_claims_in_the_loop_deliver_and_ack(hub_connection, pg_target):
    conn, _, got, hub = hub_connection
    assert conn.transport.claims is not None
    run_until(hub, lambda: len(got) >= 5)
    assert sorted(m.payload["i"] for m in got) == list(range(5))
    for message in got:
        message.ack()
    run_until(hub, lambda: _counts(pg_target) == (0, 0, 0))
    assert _counts(pg_target) == (0, 0, 0)


def test_a_claim_answered_after_its_consumer_left_is_handed_back(hub_connection, pg_target):
    conn, consumer, got, _ = hub_connection
    claims = conn.transport.claims
    conn.transport.scheduler.request_claim(
        consumer.channel, claims
    )  # in flight; the loop has not run yet
    consumer.cancel()
    claims.wait()  # the answer arrives for a channel no longer consuming "q"
    assert got == []
    assert _counts(pg_target) == (5, 0, 0)  # pending again: not delivered, not dead
    store = pg_target.open()
    try:  # handed back with the attempt refunded, not rejected (which spends one)
        assert [d.attempts for d in store.claim(["q"], 10)] == [1] * 5
    finally:
        store.close()


def test_a_late_ack_after_its_connection_closed_still_lands(pg_target):
    """acks_late across a reconnect: Celery acks through the old channel, whose
    connection is closed; the claim still holds, so the ack must land."""
    conn = Connection(pg_target.broker_url, transport_options=pg_target.transport_options)
    queue = Queue("q", routing_key="q")
    with conn.Producer() as producer:
        producer.publish({"i": 1}, routing_key="q", declare=[queue])
    message = queue(conn.default_channel).get(no_ack=False)
    assert message is not None
    conn.transport.lost = True  # as a connection error in the loop marks it: no hand-back
    conn.close()
    message.ack()
    assert _counts(pg_target) == (0, 0, 0)


def test_a_wake_up_during_a_claim_in_flight_claims_again(hub_connection, pg_target):
    """The claim in flight may have looked before the job that woke us committed: the
    wake-up must not be swallowed by the one-claim-at-a-time rule."""
    conn, consumer, got, _ = hub_connection
    transport, claims = conn.transport, conn.transport.claims
    conn.transport.scheduler.request_claim(consumer.channel, claims)
    assert select.select([claims.fileno()], [], [], 5)[0]  # claimed; answer not read yet
    with conn.Producer() as producer:
        producer.publish({"i": 5}, routing_key="q")  # commits after the claim looked
    assert select.select([transport.waiter.fileno()], [], [], 5)[0]
    transport.on_readable()  # its NOTIFY, while the claim is still in flight
    claims.on_readable()
    assert sorted(m.payload["i"] for m in got) == list(range(5))
    transport._on_tick()  # the loop's next turn claims again
    claims.wait()
    assert sorted(m.payload["i"] for m in got) == list(range(6))


@pytest.mark.parametrize("max_attempts", [3, 1])
def test_a_refused_late_ack_names_the_timeout_its_publisher_stamped(
    pg_target, caplog, max_attempts
):
    """A claim that lapsed before its ack: the warning says which visibility timeout the
    job carried (a storm of claims lapsing at once then names its cause in the log), and
    what becomes of it: delivered again, or dead-lettered when its attempts are spent
    (issue 29, item 13: it said "delivered again" either way)."""
    opts = dict(pg_target.transport_options, visibility_timeout=1.25, max_attempts=max_attempts)
    with Connection(pg_target.broker_url, transport_options=opts) as conn:
        queue = Queue("q", routing_key="q")
        with conn.Producer() as producer:
            producer.publish({"i": 1}, routing_key="q", declare=[queue])
        message = queue(conn.default_channel).get(no_ack=False)
        assert message is not None
        conn.transport.heartbeats.stop()  # nothing extends the claim: it lapses
        time.sleep(1.5)
        with caplog.at_level("WARNING", logger="kombu_alkstore"):
            message.ack()
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and "visibility timeout 1.25 s" in refused[0], refused
    if max_attempts == 1:
        assert "attempts are spent (1/1): it goes to the dead letters" in refused[0], refused
        return
    assert "it will be delivered again" in refused[0], refused
    assert _counts(pg_target) == (0, 1, 0)  # still there, claimable again


def test_a_consumer_cancelled_mid_batch_gets_the_rest_handed_back(pg_target):
    """Celery cancels a consumer from a delivered message (a control command) while the
    batch it came in is being delivered: the rest go back pending with their attempts
    refunded, not through kombu's no-consumer reject (without this each spent an attempt:
    attempts 2 when claimed again; with max_attempts 1 they would be dead letters)."""
    with Connection(pg_target.broker_url, transport_options=pg_target.transport_options) as c:
        queue = Queue("q", routing_key="q")
        with c.Producer() as producer:
            for i in range(5):
                producer.publish({"i": i}, routing_key="q", declare=[queue])
    with consumer_in_hub(pg_target) as (conn, consumer, got, hub):
        consumer.register_callback(lambda body, message: consumer.cancel())
        run_until(hub, lambda: len(got) >= 1)
        conn.transport.claims.wait()
        hub.run_once()
        assert len(got) == 1
        assert _counts(pg_target) == (4, 1, 0)  # not dead: back in the queue
        store = pg_target.open()
        try:  # handed back with the attempt refunded
            assert [d.attempts for d in store.claim(["q"], 10)] == [1] * 4
        finally:
            store.close()
