"""The attempt budget (lapsed claims, exhaustion) and the retry backoff curve."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kombu_alkstore.store.backoff import MAX_BACKOFF, backoff_delay, backoff_range
from tests.store.conformance.helpers import VT, claim_one


# ------------------------------------------------------------- attempts / exhaustion
def test_attempts_exhausted_by_lapses_dead_letters(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"poison", max_attempts=2, msg_id="poison-1")
    d1 = claim_one(s)
    assert d1.attempts == 1
    time.sleep(VT + 0.1)
    d2 = claim_one(s)
    assert (d2.id, d2.attempts) == (jid, 2)
    time.sleep(VT + 0.1)
    assert s.claim(["q"], 10) == []
    job = s.get_job(jid)
    assert (job.state, job.last_error, job.attempts) == ("dead", "attempts exhausted", 2)
    assert s.get_job("poison-1").state == "dead"
    assert s.ack([d2]) == set()
    (c,) = s.counts(["q"])
    assert (c.pending, c.processing, c.dead) == (0, 0, 1)


def test_spent_lapsed_job_does_not_use_up_the_claim_limit(opener):
    s = opener(visibility_timeout=VT)
    spent = s.enqueue("q", b"spent", max_attempts=1, priority=9)
    claim_one(s)
    waiting = s.enqueue("q", b"waiting")
    time.sleep(VT + 0.1)
    assert [d.id for d in s.claim(["q"], 1)] == [waiting]
    assert s.get_job(spent).state == "dead"


def test_lapsed_claim_of_an_expired_job_is_never_redelivered(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"x", expires_at=time.time() + VT)
    d = claim_one(s)
    time.sleep(VT + 0.1)
    assert s.claim(["q"], 10) == []
    assert s.ack([d]) == set()
    assert s.sweep().expired == 1
    assert s.get_job(jid).last_error == "expired"


def test_release_does_not_eat_the_budget(opener):
    s = opener(visibility_timeout=VT)
    jid = s.enqueue("q", b"x", max_attempts=1)
    for _ in range(3):
        d = claim_one(s)
        assert d.attempts == 1
        assert s.release([d]) == {jid}
    assert s.get_job(jid).state == "pending"


# ---------------------------------------------------------------------------- backoff
@settings(max_examples=300, deadline=None)
@given(
    attempt=st.integers(min_value=1, max_value=200),
    base=st.floats(min_value=0.001, max_value=10_000, allow_nan=False, allow_infinity=False),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_backoff_delay_lies_in_the_equal_jitter_range(attempt, base, seed):
    high = min(MAX_BACKOFF, base * 2.0 ** min(attempt - 1, 1000))
    low = high / 2
    assert backoff_range(attempt, base) == pytest.approx((low, high))
    delay = backoff_delay(attempt, base, random.Random(seed))
    assert low * (1 - 1e-12) <= delay <= high * (1 + 1e-12)
    assert delay <= MAX_BACKOFF


def test_backoff_constants():
    assert MAX_BACKOFF == 3600
    assert backoff_range(1, 5) == (2.5, 5)
    assert backoff_range(3, 5) == (10, 20)
    assert backoff_range(30, 5) == (1800, 3600)
