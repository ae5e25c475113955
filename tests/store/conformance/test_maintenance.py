"""Maintenance (the sweep): expiry, transient messages dropped, dead-letter retention,
queue expiry."""

from __future__ import annotations

import time

from kombu_alkstore.store import NewJob
from tests.store.conformance.helpers import claim_one


# ------------------------------------------------------------------------------ sweep
def test_sweep_moves_expired_rows_to_dead(store):
    t0 = time.time()
    running = store.enqueue("q", b"p", expires_at=t0 + 0.4)
    d = claim_one(store)
    assert d.id == running
    pending = store.enqueue("q", b"e", expires_at=t0 + 0.4, msg_id="exp-1")
    already = store.enqueue("q", b"a", expires_at=t0 - 1)
    keep = store.enqueue("q", b"k", expires_at=t0 + 3600)
    forever = store.enqueue("q", b"f")
    time.sleep(max(0.0, t0 + 0.5 - time.time()))
    # A claim never delivers an expired row, even before the sweep.
    assert {x.id for x in store.claim(["q"], 10)} == {keep, forever}
    result = store.sweep()
    assert result.expired == 2
    for jid in (pending, already):
        job = store.get_job(jid)
        assert (job.state, job.last_error) == ("dead", "expired"), jid
    assert store.get_job("exp-1").state == "dead"
    # Expiry is about starting: the job running past its expiry finishes and is acked.
    assert store.get_job(running).state == "processing"
    assert store.ack([d]) == {running}
    again = store.sweep()  # idempotent
    assert again.expired == 0 and again.dead_purged == 0
    (c,) = store.counts(["q"])
    assert (c.processing, c.dead) == (2, 2)


def test_expired_messages_of_transient_queues_are_dropped_not_dead_lettered(store):
    """Event and reply queues (declared with x-expires or x-message-ttl) drop what
    expires, as RabbitMQ does without a dead-letter exchange; task queues keep it."""
    store.queue_declare("celeryev.abc", message_ttl=0.2, expires=60)
    store.queue_declare("reply.celery.pidbox", expires=10)
    store.queue_declare("tasks")
    past = time.time() - 1
    for queue in ("celeryev.abc", "reply.celery.pidbox", "tasks"):
        store.enqueue(queue, b"x", expires_at=past)
    result = store.sweep()
    assert (result.expired, result.expired_dropped) == (1, 2)
    assert [j.queue for j in store.dead_list()] == ["tasks"]


def test_sweep_without_retention_keeps_dead_letters(store):
    store.enqueue("q", b"x")
    store.fail([claim_one(store)], "boom")
    assert store.sweep().dead_purged == 0
    assert len(store.dead_list()) == 1


def test_dead_letter_retention_purges_old_dead(opener):
    s = opener(dead_letter_retention=0.2)
    jid = s.enqueue("q", b"x")
    s.fail([claim_one(s)], "boom")
    assert s.sweep().dead_purged == 0  # too young
    assert s.get_job(jid).state == "dead"
    time.sleep(0.35)
    result = s.sweep()
    assert result.dead_purged == 1
    assert s.get_job(jid) is None
    assert s.sweep().dead_purged == 0


def test_queue_expires_drops_the_unused_queue(opener):
    store = opener(queue_expiry_grace=0)
    store.queue_declare("gone", expires=0.2)
    store.queue_declare("kept", expires=0.6)
    store.queue_declare("plain")
    store.exchange_declare("ex", "direct")
    store.bind("ex", "gone", "gone")
    store.bind("ex", "kept", "kept")
    store.enqueue("gone", b"x")
    store.enqueue("kept", b"y")
    store.rates_tally.flush()
    assert {t.queue for t in store.rate_totals()} == {"gone", "kept"}
    assert store.queue_exists("gone")
    assert store.sweep().queues_dropped == ()
    time.sleep(0.3)
    store.touch_queues(["kept"])
    result = store.sweep()
    assert result.queues_dropped == ("gone",)
    assert not store.queue_exists("gone")
    assert store.queue_exists("kept") and store.queue_exists("plain")
    assert store.bindings("ex") == [("kept", "kept")]
    # Its counts too (issue 29, defect 12: /metrics series of transient queues that
    # never ended, a new set for every process).
    assert {t.queue for t in store.rate_totals()} == {"kept"}
    assert store.claim(["gone"], 10) == []
    assert [d.body for d in store.claim(["kept"], 10)] == [b"y"]
    assert store.sweep().queues_dropped == ()


def test_refreshing_the_planners_statistics_is_idempotent_and_changes_no_job(store):
    """The maintenance holder asks each round (store/planner.py): after a burst, once at
    most, and claims go on as before."""
    later = time.time() + 3600
    store.enqueue_many([NewJob("q", b"later", run_at=later) for _ in range(20_000)])
    now = store.enqueue("q", b"now")
    store.refresh_statistics()
    assert store.refresh_statistics() is False
    assert [d.id for d in store.claim(["q"], 5)] == [now]
