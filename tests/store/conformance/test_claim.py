"""Claims: order, batches, limits, the claim's stamps and tokens, the next due time."""

from __future__ import annotations

import time

import pytest

from kombu_alkstore.store import NewJob
from tests.store.conformance.helpers import EPS, VT, claim_one


# ------------------------------------------------------------------------------ claim
def test_claim_order_priority_run_at_id(store):
    t0 = time.time()
    # ids ascend in this order; the expected claim order is by priority DESC, run_at, id.
    low = store.enqueue("q", b"low", priority=0, run_at=t0 - 100)
    mid_late = store.enqueue("q", b"mid-late", priority=5, run_at=t0 - 1)
    mid_early = store.enqueue("q", b"mid-early", priority=5, run_at=t0 - 10)
    mid_tie_a = store.enqueue("q", b"mid-tie-a", priority=5, run_at=t0 - 5)
    mid_tie_b = store.enqueue("q", b"mid-tie-b", priority=5, run_at=t0 - 5)
    top = store.enqueue("q", b"top", priority=255)
    expected = [top, mid_early, mid_tie_a, mid_tie_b, mid_late, low]
    # One at a time: each claim takes the best due job.
    got = []
    while ds := store.claim(["q"], 1):
        got.append(ds[0].id)
    assert got == expected


def test_claim_batch_returns_jobs_in_claim_order(store):
    t0 = time.time()
    late = store.enqueue("q", b"late", run_at=t0 - 1)
    early = store.enqueue("q", b"early", run_at=t0 - 100)
    top = store.enqueue("q", b"top", priority=9, run_at=t0)
    assert [d.id for d in store.claim(["q"], 10)] == [top, early, late]


def test_claim_batch_picks_the_best_jobs(store):
    t0 = time.time()
    ids = [store.enqueue("q", b"x", priority=p, run_at=t0 - r) for p, r in [(0, 1), (1, 2)]]
    ids += [store.enqueue("q", b"x", priority=0, run_at=t0 - 50)]
    got = {d.id for d in store.claim(["q"], 2)}
    assert got == {ids[1], ids[2]}


def test_claim_limit_and_queues(store):
    ids = store.enqueue_many([NewJob("q", b"x") for _ in range(5)])
    other = store.enqueue("other", b"o")
    assert store.claim(["q"], 0) == []
    assert store.claim([], 10) == []
    assert [d.id for d in store.claim(["q"], 2)] == ids[:2]
    assert [d.id for d in store.claim(["q"], 10)] == ids[2:]
    assert store.claim(["q"], 10) == []
    assert store.claim(["nope"], 10) == []
    assert [d.id for d in store.claim(["nope", "other"], 10)] == [other]


def test_claim_sets_processing_attempts_deadline_token(store):
    jid = store.enqueue("q", b"x", msg_id="m-1", priority=3)
    t0 = time.time()
    d = claim_one(store)
    assert (d.id, d.queue, d.body, d.priority, d.attempts, d.msg_id) == (
        jid,
        "q",
        b"x",
        3,
        1,
        "m-1",
    )
    assert isinstance(d.token, int)
    job = store.get_job(jid)
    assert job.state == "processing"
    assert job.attempts == 1
    assert job.deadline == pytest.approx(d.deadline)
    assert t0 + 300 - EPS <= job.deadline <= time.time() + 300 + EPS
    assert store.claim(["q"], 10) == []  # claimed jobs are not claimable


def test_each_claim_gets_a_fresh_token(opener):
    s = opener(visibility_timeout=VT)
    s.enqueue("q", b"x")
    tokens = set()
    for _ in range(3):
        d = claim_one(s)
        tokens.add(d.token)
        assert s.release([d]) == {d.id}
    assert len(tokens) == 3


def test_next_due(store):
    t0 = time.time()
    assert store.next_due(["q"]) is None
    store.enqueue("q", b"later", run_at=t0 + 200)
    store.enqueue("q", b"sooner", run_at=t0 + 100)
    store.enqueue("other", b"o", run_at=t0 + 50)
    assert store.next_due(["q"]) == pytest.approx(t0 + 100)
    assert store.next_due(["q", "other"]) == pytest.approx(t0 + 50)
    store.enqueue("q", b"now")
    claim_one(store)  # processing jobs do not count
    assert store.next_due(["q"]) == pytest.approx(t0 + 100)
    # Across priorities (each one's earliest counts), expired and processing jobs not.
    store.enqueue("p", b"high-late", priority=9, run_at=t0 + 300)
    store.enqueue("p", b"low-soon", priority=1, run_at=t0 + 70)
    store.enqueue("p", b"mid", priority=5, run_at=t0 + 80)
    store.enqueue("p", b"expired", priority=5, run_at=t0 + 10, expires_at=t0 - 1)
    assert store.next_due(["p"]) == pytest.approx(t0 + 70)
    store.enqueue("p", b"top-now", priority=200)
    claim_one(store, "p")
    assert store.next_due(["p"]) == pytest.approx(t0 + 70)
    assert store.next_due(["p", "q", "other", "empty"]) == pytest.approx(t0 + 50)
