"""What a holder does with a claim: ack, heartbeat, release, requeue, retry, fail.

Each is refused without the claim (a wrong token, a lapsed deadline)."""

from __future__ import annotations

import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob
from kombu_alkstore.store.backoff import backoff_range
from tests.store.conformance.helpers import EPS, VT, claim_one, forged


# ------------------------------------------------------------------------ ack / refusal
def test_ack_deletes_the_job(store):
    jid = store.enqueue("q", b"x")
    d = claim_one(store)
    assert store.ack([d]) == {jid}
    assert store.get_job(jid) is None
    assert store.ack([d]) == set()  # a second ack does not land
    assert store.ack([]) == set()


def test_ack_with_wrong_token_is_refused(store):
    jid = store.enqueue("q", b"x")
    d = claim_one(store)
    assert store.ack([forged(d, token=d.token + 1)]) == set()
    assert store.heartbeat([forged(d, token=d.token + 1)]) == set()
    assert store.release([forged(d, token=d.token + 1)]) == set()
    assert store.requeue([forged(d, token=d.token + 1)]) == set()
    assert store.fail([forged(d, token=d.token + 1)], "boom") == set()
    job = store.get_job(jid)
    assert (job.state, job.attempts) == ("processing", 1)
    assert job.deadline == pytest.approx(d.deadline)
    assert store.ack([d]) == {jid}


def test_ack_many_only_lands_the_held_ones(store):
    store.enqueue_many([NewJob("q", b"x") for _ in range(3)])
    a, b, c = store.claim(["q"], 3)
    assert store.ack([a, forged(b, token=b.token ^ 1), c]) == {a.id, c.id}
    assert store.get_job(b.id).state == "processing"


def test_ack_after_deadline_is_refused(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"x")
    d = claim_one(s)
    time.sleep(VT + 0.1)
    assert s.ack([d]) == set()
    assert s.fail([d], "late") == set()
    assert s.release([d]) == set()
    assert s.get_job(jid) is not None
    again = claim_one(s)  # the lapsed job is reclaimable at once, eating an attempt
    assert (again.id, again.attempts) == (jid, 2)
    assert again.token != d.token


def test_late_heartbeat_is_refused_and_does_not_steal_back(opener):
    s = opener(visibility_timeout=VT)
    other = opener(visibility_timeout=VT)  # a second consumer
    jid = s.enqueue("q", b"x")
    d1 = claim_one(s)
    time.sleep(VT + 0.1)
    d2 = claim_one(other)
    assert d2.id == jid and d2.attempts == 2
    assert s.heartbeat([d1]) == set()
    assert s.heartbeat([d1], extend=100) == set()
    job = s.get_job(jid)
    assert job.deadline == pytest.approx(d2.deadline)
    assert s.ack([d1]) == set()
    assert other.ack([d2]) == {jid}


def test_heartbeat_extends_the_deadline(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"x")
    d = claim_one(s)
    time.sleep(0.1)
    t0 = time.time()
    assert s.heartbeat([d], extend=5) == {jid}
    assert t0 + 5 - EPS <= s.get_job(jid).deadline <= time.time() + 5 + EPS
    time.sleep(VT + 0.1)  # past the original deadline
    assert s.claim(["q"], 10) == []
    assert s.ack([d]) == {jid}


def test_heartbeat_default_extend_is_the_visibility_timeout(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"x")
    d = claim_one(s)
    for _ in range(4):  # keeps the claim well past one visibility timeout
        time.sleep(VT / 2)
        assert s.heartbeat([d]) == {jid}
        assert s.claim(["q"], 10) == []
    assert s.ack([d]) == {jid}


def test_heartbeat_many_returns_the_held_ones(opener):
    s = opener(visibility_timeout=VT)
    s.enqueue_many([NewJob("q", b"x") for _ in range(3)])
    a, b, c = s.claim(["q"], 3)
    assert s.heartbeat([a, b, forged(c, token=c.token + 1)], extend=30) == {a.id, b.id}
    assert s.heartbeat([]) == set()
    with pytest.raises(ConfigurationError, match="-1"):
        s.heartbeat([a], extend=-1)


# ----------------------------------------------------------- release / requeue / retry
def test_release_refunds_the_attempt_and_is_due_at_once(store):
    jid = store.enqueue("q", b"x")
    d = claim_one(store)
    assert d.attempts == 1
    t0 = time.time()
    assert store.release([d]) == {jid}
    job = store.get_job(jid)
    assert (job.state, job.attempts, job.deadline) == ("pending", 0, None)
    assert job.run_at <= time.time() + EPS and job.run_at >= t0 - EPS
    again = claim_one(store)
    assert (again.id, again.attempts) == (jid, 1)
    assert store.release([d]) == set()  # the old claim is gone


def test_requeue_first_delivery_is_immediate_then_backoff(store):
    jid = store.enqueue("q", b"x", backoff_base=10)
    d1 = claim_one(store)
    assert store.requeue([d1]) == {jid}
    job = store.get_job(jid)
    assert (job.state, job.attempts) == ("pending", 1)  # the attempt is kept
    d2 = claim_one(store)  # due at once
    assert (d2.id, d2.attempts) == (jid, 2)
    t0 = time.time()
    assert store.requeue([d2]) == {jid}
    t1 = time.time()
    job = store.get_job(jid)
    low, high = backoff_range(2, 10)  # [10, 20]
    assert (low, high) == (10, 20)
    assert t0 + low - EPS <= job.run_at <= t1 + high + EPS
    assert (job.state, job.attempts) == ("pending", 2)
    assert store.claim(["q"], 10) == []


def test_requeue_at_spent_budget_dead_letters(store):
    jid = store.enqueue("q", b"x", max_attempts=1, msg_id="spent-1")
    d = claim_one(store)
    assert store.requeue([d]) == {jid}
    job = store.get_job(jid)
    assert (job.state, job.last_error, job.attempts) == ("dead", "attempts exhausted", 1)
    assert store.get_job("spent-1").id == jid
    assert store.claim(["q"], 10) == []


def test_retry_with_explicit_delay(store):
    jid = store.enqueue("q", b"x")
    d = claim_one(store)
    t0 = time.time()
    assert store.retry([d], delay=30) == {jid}
    job = store.get_job(jid)
    assert (job.state, job.attempts) == ("pending", 1)
    assert t0 + 30 - EPS <= job.run_at <= time.time() + 30 + EPS
    assert store.claim(["q"], 10) == []
    with pytest.raises(ConfigurationError, match="-5"):
        store.retry([d], delay=-5)


def test_retry_zero_delay_is_due_at_once(store):
    jid = store.enqueue("q", b"x")
    d = claim_one(store)
    assert store.retry([d], delay=0) == {jid}
    assert claim_one(store).attempts == 2


def test_retry_default_curve(store):
    jid = store.enqueue("q", b"x", backoff_base=40)
    d = claim_one(store)
    t0 = time.time()
    assert store.retry([d]) == {jid}  # attempt 1: [base/2, base]
    t1 = time.time()
    job = store.get_job(jid)
    assert t0 + 20 - EPS <= job.run_at <= t1 + 40 + EPS


def test_retry_at_spent_budget_dead_letters_with_the_error(store):
    jid = store.enqueue("q", b"x", max_attempts=1)
    d = claim_one(store)
    assert store.retry([d], delay=1, error="gave up") == {jid}
    job = store.get_job(jid)
    assert (job.state, job.last_error) == ("dead", "gave up")


def test_fail_moves_to_dead(store):
    jid = store.enqueue("q", b"payload", msg_id="celery-task-id", priority=4)
    d = claim_one(store)
    t0 = time.time()
    assert store.fail([d], "ValueError('boom')") == {jid}
    for key in (jid, "celery-task-id"):
        job = store.get_job(key)
        assert job is not None, key
        assert (job.id, job.state, job.last_error) == (jid, "dead", "ValueError('boom')")
        assert (job.queue, job.body, job.priority, job.msg_id) == (
            "q",
            b"payload",
            4,
            "celery-task-id",
        )
        assert job.attempts == 1
        assert t0 - EPS <= job.died_at <= time.time() + EPS
    assert store.claim(["q"], 10) == []
    assert store.ack([d]) == set()
    assert store.fail([d], "again") == set()
    assert store.get_job(jid).last_error == "ValueError('boom')"
