"""Reads: jobs by id or message id, counts; and purge."""

from __future__ import annotations

import time

import pytest

from kombu_alkstore.store import NewJob
from tests.store.conformance.helpers import EPS, claim_one, total_jobs


def test_get_job_missing(store):
    assert store.get_job(12345678) is None
    assert store.get_job("no-such-msg") is None


def test_get_job_by_msg_id_sees_live_jobs(store):
    jid = store.enqueue("q", b"x", msg_id="live-1")
    job = store.get_job("live-1")
    assert (job.id, job.state) == (jid, "pending")


# ---------------------------------------------------------------------- counts, purge
def test_counts(store):
    t0 = time.time()
    store.enqueue_many([NewJob("q", b"p"), NewJob("q", b"p2")])
    store.enqueue("q", b"delayed", delay=100)
    store.enqueue("q", b"to-process")
    store.enqueue("q", b"to-die")
    store.enqueue("other", b"o")
    a, b, c = store.claim(["q"], 3)  # p, p2, to-process (by id)
    assert store.release([a, b]) == {a.id, b.id}
    batch = {d.body: d for d in store.claim(["q"], 10)}  # p, p2, to-die
    assert set(batch) == {b"p", b"p2", b"to-die"}
    assert store.fail([batch[b"to-die"]], "x")
    time.sleep(0.05)
    counts = {x.queue: x for x in store.counts()}
    assert set(counts) == {"q", "other"}
    q = counts["q"]
    assert (q.pending, q.delayed, q.processing, q.dead) == (0, 1, 3, 1)
    assert q.oldest_age is None  # no due pending job
    o = counts["other"]
    assert (o.pending, o.delayed, o.processing, o.dead) == (1, 0, 0, 0)
    assert 0.04 <= o.oldest_age <= time.time() - t0 + EPS
    (empty,) = store.counts(["empty"])
    assert (empty.queue, empty.pending, empty.delayed, empty.processing, empty.dead) == (
        "empty",
        0,
        0,
        0,
        0,
    )
    assert empty.oldest_age is None
    assert [x.queue for x in store.counts(["other", "q"])] == ["other", "q"]


def test_purge_deletes_pending_only(store):
    store.enqueue_many([NewJob("q", b"x") for _ in range(3)])
    store.enqueue("q", b"delayed", delay=100)
    store.enqueue("other", b"o")
    d = claim_one(store)
    assert store.purge("q") == 3
    (c,) = store.counts(["q"])
    assert (c.pending, c.delayed, c.processing) == (0, 0, 1)
    assert store.ack([d]) == {d.id}
    assert store.purge("q") == 0
    assert store.purge("nope") == 0
    assert total_jobs(store, "other") == 1


# --------------------------------------------------------------------- vacuum health
def test_vacuum_health_names_only_the_store_tables(store):
    store.enqueue("q", b"x")
    health = store.vacuum_health(older_than=0)
    assert isinstance(health.holders, tuple) and isinstance(health.tables, tuple)
    names = {t.name for t in store.tables.all()}
    assert {t.table for t in health.tables} <= names
    assert health.dead_rows == sum(t.dead for t in health.tables) >= 0


def test_vacuum_health_refuses_a_bad_age(store):
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="older_than must be a number of seconds"):
            store.vacuum_health(older_than=bad)


def test_knows_queue_declared_holding_or_paused(store):
    assert not store.knows_queue("nowhere")
    store.enqueue("holding", b"x")
    store.queue_declare("declared")
    store.pause_queue("paused-only")
    assert store.knows_queue("holding") and store.knows_queue("declared")
    assert store.knows_queue("paused-only")
    assert not store.knows_queue("paused-only", paused=False)
