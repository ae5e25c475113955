"""The store's contract, run unchanged against both engines (PostgreSQL and SQLite).

Every test takes the ``store`` (or ``target``) fixture, which is parametrized over the
engines; each test gets a private PostgreSQL schema or SQLite file. Timing tests use a
tiny visibility timeout (0.3 s) and short sleeps.
"""

from __future__ import annotations

import math
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kombu_alkstore.errors import ConfigurationError, SchemaMissing
from kombu_alkstore.store import (
    Delivery,
    NewJob,
    ScheduleRow,
    Store,
    bound_connection,
    open_store,
)
from kombu_alkstore.store.backoff import MAX_BACKOFF, backoff_delay, backoff_range
from kombu_alkstore.store.schema import SCHEMA_VERSION
from tests.helpers import run_sql

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

#: Small enough to let a claim lapse in a test, large enough for a few statements.
VT = 0.3
#: Slack for clock reads around a statement (time.time() in Python vs the database).
EPS = 0.25


@pytest.fixture
def opener(target) -> Iterator:
    """Open more stores on the test's target (other options, or "another process")."""
    opened: list[Store] = []

    def open_(**options) -> Store:
        s = target.open(**options)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()


def claim_one(store: Store, queue: str = "q") -> Delivery:
    got = store.claim([queue], 1)
    assert len(got) == 1, got
    return got[0]


def forged(d: Delivery, **changes) -> Delivery:
    """A copy of a delivery with some fields changed (a wrong token, say)."""
    fields = {f: getattr(d, f) for f in Delivery.__slots__}
    fields.update(changes)
    return Delivery(**fields)


def total_jobs(store: Store, queue: str) -> int:
    (c,) = store.counts([queue])
    return c.pending + c.delayed + c.processing + c.dead


# ------------------------------------------------------------------------------ setup
def test_setup_is_idempotent(store, opener):
    jid = store.enqueue("q", b"kept")
    store.setup()
    store.setup()
    assert store.schema_version() == SCHEMA_VERSION
    other = opener()  # a second store on the same schema runs setup again
    assert other.schema_version() == SCHEMA_VERSION
    assert store.get_job(jid).body == b"kept"
    ddl = store.ddl()
    assert ddl and all(isinstance(s, str) for s in ddl)
    assert all("IF NOT EXISTS" in s for s in ddl if s.upper().startswith("CREATE"))


def test_setup_off_on_missing_tables_is_a_clear_error(target):
    with pytest.raises(SchemaMissing, match=target.schema):
        target.open(setup=False)


def test_setup_off_on_an_older_layout_is_a_clear_error_and_setup_upgrades_it(store, target):
    meta = store.tables.qualified(store.tables.meta)
    offers = store.tables.qualified(store.tables.offers)
    jid = store.enqueue("q", b"kept")
    run_sql(target, f"DROP TABLE {offers}")  # as versions 1 and 2 had it
    run_sql(target, f"UPDATE {meta} SET value = '2' WHERE key = 'schema_version'")
    with pytest.raises(SchemaMissing, match=rf"schema version 2, .* needs {SCHEMA_VERSION}"):
        target.open(setup=False)
    upgraded = target.open()  # setup=True adds what is new
    try:
        assert upgraded.schema_version() == SCHEMA_VERSION
        assert upgraded.get_job(jid).body == b"kept"
        target.open(setup=False).close()
    finally:
        upgraded.close()


# ---------------------------------------------------------------------------- enqueue
def test_enqueue_bytes_and_text_bodies(store):
    raw = bytes(range(256))
    a = store.enqueue("q", raw)
    b = store.enqueue("q", "héllo 🎉")
    assert store.get_job(a).body == raw
    assert store.get_job(b).body == "héllo 🎉".encode()
    got = store.claim(["q"], 10)
    assert [(d.id, d.body) for d in got] == [(a, raw), (b, "héllo 🎉".encode())]


def test_enqueue_many_returns_ids_in_order(store):
    jobs = [NewJob("q", f"body-{i}".encode()) for i in range(25)]
    ids = store.enqueue_many(jobs)
    assert len(ids) == 25 and len(set(ids)) == 25
    assert ids == sorted(ids)
    for i, jid in enumerate(ids):
        assert store.get_job(jid).body == f"body-{i}".encode()
    assert store.enqueue_many([]) == []
    got = store.claim(["q"], 100)
    assert [d.id for d in got] == ids
    assert [d.body for d in got] == [j.body for j in jobs]


@pytest.mark.parametrize("confirm", [True, False], ids=["confirmed", "pipelined"])
def test_publish_then_flush_lands_every_job_in_order(opener, confirm):
    s = opener(confirm_publish=confirm)
    jobs = [NewJob("q", f"body-{i}".encode(), msg_id=f"m{i}") for i in range(300)]
    for job in jobs[:-2]:
        s.publish([job])
    s.publish(jobs[-2:])  # a fanout's jobs: one publish
    s.flush_publishes()
    got = s.claim(["q"], 1000)
    assert [d.body for d in got] == [j.body for j in jobs]
    s.publish([])
    with pytest.raises(ConfigurationError, match="queue name must not be empty"):
        s.publish([NewJob("", b"x")])
    s.flush_publishes()
    assert s.size("q") == 0


def test_enqueue_fields_are_stored(store):
    t0 = time.time()
    jid = store.enqueue("q", b"x", priority=7, expires_at=t0 + 100, msg_id="task-1")
    job = store.get_job(jid)
    assert (job.queue, job.priority, job.msg_id, job.state, job.attempts) == (
        "q",
        7,
        "task-1",
        "pending",
        0,
    )
    assert job.expires_at == pytest.approx(t0 + 100)
    assert t0 - EPS <= job.created_at <= time.time() + EPS
    assert t0 - EPS <= job.run_at <= time.time() + EPS


def test_delay_and_run_at(store):
    t0 = time.time()
    delayed = store.enqueue("q", b"d", delay=100)
    absolute = store.enqueue("q", b"a", run_at=t0 + 50)
    past = store.enqueue("q", b"p", run_at=t0 - 50)
    assert t0 + 100 - EPS <= store.get_job(delayed).run_at <= time.time() + 100 + EPS
    assert store.get_job(absolute).run_at == pytest.approx(t0 + 50)
    assert store.get_job(past).run_at == pytest.approx(t0 - 50)
    assert [d.id for d in store.claim(["q"], 10)] == [past]


def test_delayed_job_is_not_claimed_until_due(store):
    store.enqueue("q", b"later", delay=0.4)
    assert store.claim(["q"], 10) == []
    time.sleep(0.5)
    assert [d.body for d in store.claim(["q"], 10)] == [b"later"]


def test_stamps_from_store_defaults_and_overrides(opener):
    s = opener(visibility_timeout=7, max_attempts=5, backoff_base=2)
    s.enqueue("q", b"defaults")
    s.enqueue("q", b"own", visibility_timeout=11, max_attempts=9, backoff_base=0.5)
    t0 = time.time()
    d1, d2 = s.claim(["q"], 2)
    assert (d1.body, d1.max_attempts, d1.backoff_base) == (b"defaults", 5, 2)
    assert t0 + 7 - EPS <= d1.deadline <= time.time() + 7 + EPS
    assert (d2.body, d2.max_attempts, d2.backoff_base) == (b"own", 9, 0.5)
    assert t0 + 11 - EPS <= d2.deadline <= time.time() + 11 + EPS
    assert s.get_job(d1.id).max_attempts == 5


def test_plain_store_defaults(store):
    jid = store.enqueue("q", b"x")
    t0 = time.time()
    d = claim_one(store)
    assert d.id == jid
    assert (d.max_attempts, d.backoff_base) == (3, 5.0)
    assert t0 + 300 - EPS <= d.deadline <= time.time() + 300 + EPS


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


def test_get_job_missing(store):
    assert store.get_job(12345678) is None
    assert store.get_job("no-such-msg") is None


def test_get_job_by_msg_id_sees_live_jobs(store):
    jid = store.enqueue("q", b"x", msg_id="live-1")
    job = store.get_job("live-1")
    assert (job.id, job.state) == (jid, "pending")


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
    assert store.queue_exists("gone")
    assert store.sweep().queues_dropped == ()
    time.sleep(0.3)
    store.touch_queues(["kept"])
    result = store.sweep()
    assert result.queues_dropped == ("gone",)
    assert not store.queue_exists("gone")
    assert store.queue_exists("kept") and store.queue_exists("plain")
    assert store.bindings("ex") == [("kept", "kept")]
    assert store.claim(["gone"], 10) == []
    assert [d.body for d in store.claim(["kept"], 10)] == [b"y"]
    assert store.sweep().queues_dropped == ()


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


# ----------------------------------------------------------------------- dead letters
def _kill(store: Store, queue: str, n: int, error: str = "boom") -> list[int]:
    store.enqueue_many([NewJob(queue, f"{queue}-{i}".encode()) for i in range(n)])
    ds = store.claim([queue], n)
    assert store.fail(ds, error) == {d.id for d in ds}
    return [d.id for d in ds]


def test_dead_list(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 1)
    everything = store.dead_list()
    assert {j.id for j in everything} == set(q1 + q2)
    assert all(j.state == "dead" and j.last_error == "boom" for j in everything)
    died = [j.died_at for j in everything]
    assert died == sorted(died, reverse=True)  # newest first
    assert everything[0].id == q2[0]
    assert {j.id for j in store.dead_list("q1")} == set(q1)
    assert len(store.dead_list(limit=2)) == 2
    assert store.dead_list("nope") == []


def test_dead_requeue_by_ids_and_by_queue(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 2)
    assert store.dead_requeue(ids=[q1[0]]) == 1
    job = store.get_job(q1[0])
    assert (job.state, job.attempts, job.body) == ("pending", 0, b"q1-0")
    d = claim_one(store, "q1")
    assert (d.id, d.attempts) == (q1[0], 1)  # keeps its own id, fresh budget
    assert store.dead_requeue(queue="q2") == 2
    assert {x.id for x in store.claim(["q2"], 10)} == set(q2)
    assert store.dead_requeue(ids=[q1[1]], queue="q2") == 0  # both filters apply
    assert store.dead_requeue(ids=[987654321]) == 0
    assert store.dead_requeue() == 2
    assert store.dead_list() == []


def test_dead_purge_by_ids_and_by_queue(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 2)
    assert store.dead_purge(ids=[q1[0]]) == 1
    assert store.get_job(q1[0]) is None
    assert store.dead_purge(queue="q1") == 2
    assert {j.id for j in store.dead_list()} == set(q2)
    assert store.dead_purge() == 2
    assert store.dead_list() == []
    assert store.dead_purge() == 0


# ---------------------------------------------------------------------------- routing
def test_exchanges_bindings_and_routing_version(store):
    v0 = store.routing_version()
    assert store.exchange_type("ex") is None
    store.exchange_declare("ex", "direct")
    v1 = store.routing_version()
    assert v1 != v0
    assert store.exchange_type("ex") == "direct"
    store.exchange_declare("ex", "direct")  # no change, no bump
    assert store.routing_version() == v1
    store.exchange_declare("ex", "topic")
    v2 = store.routing_version()
    assert v2 != v1 and store.exchange_type("ex") == "topic"
    store.bind("ex", "a.*", "q1")
    store.bind("ex", "b.#", "q2")
    store.bind("ex", "", "q3")
    v3 = store.routing_version()
    assert v3 != v2
    store.bind("ex", "a.*", "q1")  # already bound
    assert store.routing_version() == v3
    assert sorted(store.bindings("ex")) == [("", "q3"), ("a.*", "q1"), ("b.#", "q2")]
    store.unbind("ex", "b.#", "q2")
    v4 = store.routing_version()
    assert v4 != v3
    assert sorted(store.bindings("ex")) == [("", "q3"), ("a.*", "q1")]
    store.unbind("ex", "b.#", "q2")  # nothing to unbind
    assert store.routing_version() == v4
    store.exchange_declare("fan", "fanout")
    store.bind("fan", "", "q1")
    store.exchange_delete("ex")
    assert store.exchange_type("ex") is None
    assert store.bindings("ex") == []
    assert store.bindings("fan") == [("", "q1")]
    assert store.routing_version() not in (v0, v1, v2, v3, v4)
    with pytest.raises(ConfigurationError, match="headers"):
        store.exchange_declare("h", "headers")
    assert store.exchange_type("h") is None


def test_routing_is_shared_between_stores(store, opener):
    other = opener()
    store.exchange_declare("ex", "fanout")
    store.bind("ex", "", "q")
    assert other.exchange_type("ex") == "fanout"
    assert other.bindings("ex") == [("", "q")]
    assert other.routing_version() == store.routing_version()


def test_queue_declare_message_ttl_stamps_expires_at(store):
    store.queue_declare("ttl", message_ttl=10)
    t0 = time.time()
    jid = store.enqueue("ttl", b"x")
    assert t0 + 10 - EPS <= store.get_job(jid).expires_at <= time.time() + 10 + EPS
    own = store.enqueue("ttl", b"own", expires_at=t0 + 1000)
    assert store.get_job(own).expires_at == pytest.approx(t0 + 1000)
    assert store.get_job(store.enqueue("no-ttl", b"y")).expires_at is None


def test_queue_declare_exists_delete(store):
    assert not store.queue_exists("q")
    store.queue_declare("q")
    store.queue_declare("q")  # refresh
    assert store.queue_exists("q")
    store.bind("ex", "rk", "q")
    store.enqueue_many([NewJob("q", b"x") for _ in range(3)])
    keep = store.enqueue("other", b"o")
    assert store.queue_delete("q") == 3
    assert not store.queue_exists("q")
    assert store.bindings("ex") == []
    assert store.claim(["q"], 10) == []
    assert store.get_job(keep) is not None
    assert store.queue_delete("q") == 0


# ----------------------------------------------------------------------------- leases
def test_leases(store):
    assert store.lease_holder("lead") is None
    assert store.lease_acquire("lead", "a", 0.4)
    assert store.lease_holder("lead") == "a"
    assert not store.lease_acquire("lead", "b", 10)
    assert store.lease_holder("lead") == "a"
    assert store.lease_acquire("lead", "a", 0.4)  # renew
    assert store.lease_acquire("other", "b", 10)  # independent names
    time.sleep(0.5)
    assert store.lease_holder("lead") is None  # lapsed
    assert store.lease_acquire("lead", "b", 10)  # stolen after expiry
    assert store.lease_holder("lead") == "b"
    assert not store.lease_acquire("lead", "a", 10)
    assert not store.lease_release("lead", "a")  # not the holder
    assert store.lease_holder("lead") == "b"
    assert store.lease_release("lead", "b")
    assert store.lease_holder("lead") is None
    assert not store.lease_release("lead", "b")
    assert store.lease_acquire("lead", "a", 10)


# -------------------------------------------------------------------------- schedules
def _sched(name: str, interval: float, next_at: float, **kw) -> ScheduleRow:
    fields = dict(
        name=name,
        spec=f"@every {interval:g}s",
        interval=interval,
        task="proj.tasks.add",
        args="[1, 2]",
        kwargs="{}",
        options="{}",
        next_at=next_at,
        origin="config",
    )
    fields.update(kw)
    return ScheduleRow(**fields)


def test_schedules_upsert_list_delete(store):
    assert store.schedule_list() == []
    store.schedule_upsert(_sched("b", 10, 1000.0))
    store.schedule_upsert(_sched("a", 5, 500.0, origin="api"))
    assert [r.name for r in store.schedule_list()] == ["a", "b"]
    assert store.schedule_list()[1] == _sched("b", 10, 1000.0)
    # keep_grid: same interval keeps the stored boundary, the rest is updated.
    store.schedule_upsert(_sched("b", 10, 2000.0, task="proj.tasks.mul", args="[3]"))
    b = {r.name: r for r in store.schedule_list()}["b"]
    assert (b.next_at, b.task, b.args) == (1000.0, "proj.tasks.mul", "[3]")
    # A changed interval takes the new boundary.
    store.schedule_upsert(_sched("b", 20, 3000.0))
    b = {r.name: r for r in store.schedule_list()}["b"]
    assert (b.interval, b.next_at) == (20, 3000.0)
    # keep_grid=False always takes the given boundary.
    store.schedule_upsert(_sched("b", 20, 4000.0), keep_grid=False)
    assert {r.name: r for r in store.schedule_list()}["b"].next_at == 4000.0
    assert store.schedule_delete("a")
    assert not store.schedule_delete("a")
    assert [r.name for r in store.schedule_list()] == ["b"]


def test_schedule_tick_due_and_guarded_advance(store):
    now = time.time()
    store.schedule_upsert(_sched("due", 10, now - 5))
    store.schedule_upsert(_sched("due2", 10, now - 50))
    store.schedule_upsert(_sched("future", 10, now + 1000))
    with store.schedule_tick() as tick:
        due = tick.due(now)
        assert [r.name for r in due] == ["due2", "due"]  # by next_at
        assert tick.advance("due", now - 5, now + 5)
        assert not tick.advance("due2", now - 999, now + 5)  # wrong prev: refused
        store.enqueue("beat", b"fired")  # commits with the tick
    rows = {r.name: r for r in store.schedule_list()}
    assert rows["due"].next_at == pytest.approx(now + 5)
    assert rows["due2"].next_at == pytest.approx(now - 50)
    with store.schedule_tick() as tick:
        assert not tick.advance("due", now - 5, now + 15)  # already advanced
        assert [r.name for r in tick.due(now)] == ["due2"]
    assert store.counts(["beat"])[0].pending == 1


def test_schedule_tick_rolls_back_with_its_enqueues(store):
    now = time.time()
    store.schedule_upsert(_sched("s", 10, now - 1))
    with pytest.raises(RuntimeError), store.schedule_tick() as tick:
        assert tick.advance("s", now - 1, now + 9)
        store.enqueue("beat", b"fired")
        raise RuntimeError("crash mid-tick")
    assert store.schedule_list()[0].next_at == pytest.approx(now - 1)
    assert store.counts(["beat"])[0].pending == 0


# ----------------------------------------------------------------------------- waiter
def test_waiter_wakes_on_enqueue_from_another_store(store, opener, engine):
    other = opener()
    waiter = store.waiter()
    try:
        waiter.poll()  # drain anything from setup
        started = threading.Event()

        def publish() -> None:
            started.wait(5)
            time.sleep(0.2)
            other.enqueue("wq", b"x")

        t = threading.Thread(target=publish)
        t.start()
        started.set()
        t0 = time.monotonic()
        wake = waiter.wait(5)
        elapsed = time.monotonic() - t0
        t.join()
        assert wake, wake
        assert elapsed < 1.2, elapsed
        if engine == "postgresql":
            assert "wq" in wake.queues
        assert [d.body for d in store.claim(["wq"], 1)] == [b"x"]
    finally:
        waiter.close()


def test_waiter_times_out_when_nothing_happens(store):
    waiter = store.waiter()
    try:
        waiter.poll()
        t0 = time.monotonic()
        wake = waiter.wait(0.3)
        elapsed = time.monotonic() - t0
        assert not wake
        assert 0.25 <= elapsed < 1.5
        assert not waiter.poll()
    finally:
        waiter.close()


# -------------------------------------------------------------- transactional publish
def _caller_connection(target, tmp_path):
    if target.engine == "postgresql":
        return psycopg.connect(target.url)  # not autocommit: a transaction is open
    conn = sqlite3.connect(tmp_path / "broker.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_bound_connection_commits_or_rolls_back_with_the_caller(store, target, tmp_path, outcome):
    conn = _caller_connection(target, tmp_path)
    try:
        with bound_connection(conn):
            ids = store.enqueue_many([NewJob("tx", b"a"), NewJob("tx", b"b")])
        if outcome == "commit":
            conn.execute("COMMIT") if target.engine == "sqlite" else conn.commit()
        else:
            conn.execute("ROLLBACK") if target.engine == "sqlite" else conn.rollback()
    finally:
        conn.close()
    got = [d.id for d in store.claim(["tx"], 10)]
    assert got == (ids if outcome == "commit" else [])


def test_bound_connection_to_another_database_is_refused(store, engine, tmp_path):
    if engine == "postgresql":  # same server, another database
        conn = psycopg.connect(PG_URL.rsplit("/", 1)[0] + "/postgres")
    else:
        conn = sqlite3.connect(tmp_path / "elsewhere.db")
    try:
        with pytest.raises(ConfigurationError), bound_connection(conn):
            store.enqueue("tx", b"x")
    finally:
        conn.close()
    assert store.counts() == []


# ---------------------------------------------------------------------- names as data
NASTY = [
    "q'; DROP TABLE jobs; --",
    'dq"x"',
    "ünïcödé-名前-очередь",
    "emoji-🎉🐍👩‍💻",
    "params %s %(x)s ? :name $1 {jobs}",
    "back\\slash\ttab\nnewline",
]


def _long_name(seed: str) -> str:
    s = (seed + " '\"🎉ü名") * 40
    return s[:200]


@pytest.mark.parametrize("name", [*NASTY, _long_name("long")], ids=range(len(NASTY) + 1))
def test_names_are_stored_and_claimed_as_data(store, name):
    assert len(_long_name("x")) == 200
    jid = store.enqueue(name, b"body", msg_id=name)
    store.enqueue("plain", b"other")
    d = claim_one(store, name)
    assert (d.id, d.queue, d.msg_id) == (jid, name, name)
    job = store.get_job(name)
    assert (job.id, job.queue, job.msg_id) == (jid, name, name)
    store.exchange_declare(name, "topic")
    assert store.exchange_type(name) == "topic"
    store.bind(name, name, name)
    assert store.bindings(name) == [(name, name)]
    store.queue_declare(name, message_ttl=100)
    assert store.queue_exists(name)
    (c,) = store.counts([name])
    assert (c.queue, c.processing) == (name, 1)
    assert store.fail([d], name) == {jid}
    assert store.dead_list(name)[0].last_error == name
    assert store.get_job(name).state == "dead"
    assert store.lease_acquire(name, name, 10)
    assert store.lease_holder(name) == name
    store.schedule_upsert(_sched(name, 5, 1.0, task=name, args=name))
    assert store.schedule_list()[0].name == name
    assert store.dead_requeue(queue=name) == 1
    assert store.purge(name) == 1
    store.unbind(name, name, name)
    store.exchange_delete(name)
    assert store.queue_delete(name) == 0
    assert total_jobs(store, "plain") == 1  # nothing else touched
    assert store.schema_version() == SCHEMA_VERSION


# -------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"queue": ""}, "queue name"),
        ({"delay": -1}, "-1"),
        ({"priority": 300}, "300"),
        ({"priority": -1}, "-1"),
        ({"queue": "a\x00b"}, "NUL"),
        ({"msg_id": "m\x00"}, "NUL"),
        ({"queue": "q" * 5000}, "5000"),
        ({"visibility_timeout": 0}, "visibility_timeout"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff_base": -2}, "backoff_base"),
        ({"body": 12}, "body"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_bad_job_is_refused_and_nothing_written(store, kwargs, needle):
    fields = {"queue": "q", "body": b"x", **kwargs}
    queue, body = fields.pop("queue"), fields.pop("body")
    with pytest.raises(ConfigurationError) as err:
        store.enqueue(queue, body, **fields)
    assert needle in str(err.value)
    with pytest.raises(ConfigurationError):  # a batch with one bad job writes nothing
        store.enqueue_many([NewJob("q", b"good"), NewJob(queue, body, **fields)])
    assert store.counts() == []
    assert store.claim(["q"], 10) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay": math.nan},
        {"delay": math.inf},
        {"run_at": math.nan},
        {"run_at": math.inf},
        {"expires_at": math.nan},
        {"visibility_timeout": math.nan},
        {"visibility_timeout": math.inf},
        {"backoff_base": math.nan},
    ],
    ids=repr,
)
def test_non_finite_numbers_are_refused(store, kwargs):
    # NaN/inf would make a job that is never due (PostgreSQL) or a driver error (SQLite).
    ((name, value),) = kwargs.items()
    with pytest.raises(ConfigurationError) as err:
        store.enqueue("q", b"x", **kwargs)
    assert name in str(err.value) and repr(value) in str(err.value)
    assert store.counts() == []
    store.enqueue("q", b"x")
    d = claim_one(store)
    with pytest.raises(ConfigurationError, match="nan"):
        store.retry([d], delay=math.nan)
    with pytest.raises(ConfigurationError, match="inf"):
        store.heartbeat([d], extend=math.inf)
    assert store.get_job(d.id).deadline == pytest.approx(d.deadline)


@pytest.mark.parametrize(
    "kwargs",
    [{"message_ttl": -5}, {"expires": -1}, {"message_ttl": math.nan}, {"expires": 0}],
    ids=repr,
)
def test_queue_declare_bad_timeouts_are_refused(store, kwargs):
    ((name, value),) = kwargs.items()
    with pytest.raises(ConfigurationError) as err:
        store.queue_declare("q", **kwargs)
    assert name in str(err.value) and repr(value) in str(err.value)
    assert not store.queue_exists("q")


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


def test_bad_names_for_routing_are_refused(store):
    v = store.routing_version()
    with pytest.raises(ConfigurationError, match="exchange name"):
        store.exchange_declare("", "direct")
    with pytest.raises(ConfigurationError, match="queue name"):
        store.bind("ex", "rk", "")
    with pytest.raises(ConfigurationError, match="NUL"):
        store.bind("ex", "r\x00k", "q")
    with pytest.raises(ConfigurationError, match="queue name"):
        store.queue_declare("")
    assert store.routing_version() == v
    assert store.bindings("ex") == []
    assert not store.queue_exists("")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("visibility_timeout", -1),
        ("visibility_timeout", 0),
        ("backoff_base", -3),
        ("max_attempts", 0),
        ("dead_letter_retention", -5),
        ("busy_timeout", 0),
        ("visibility_timeout", "soon"),
    ],
)
def test_bad_option_is_refused_and_nothing_written(target, tmp_path, option, value):
    with pytest.raises(ConfigurationError) as err:
        target.open(**{option: value})
    assert option in str(err.value)
    assert repr(value) in str(err.value) or str(value) in str(err.value)
    _assert_nothing_created(target, tmp_path)


@pytest.mark.parametrize("schema", ["bad;drop", "1abc", 'x"y', "", "a" * 49, "sp ace"])
def test_bad_schema_name_is_refused_and_nothing_written(target, tmp_path, schema):
    with pytest.raises(ConfigurationError) as err:
        open_store(target.url, schema=schema)
    assert repr(schema) in str(err.value)
    assert "identifier" in str(err.value)
    if target.engine == "postgresql":
        with psycopg.connect(target.url) as conn:
            n = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()[0]
        assert n == 0
    else:
        assert not (tmp_path / "broker.db").exists()


def _assert_nothing_created(target, tmp_path) -> None:
    if target.engine == "postgresql":
        with psycopg.connect(target.url) as conn:
            n = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (target.schema,)
            ).fetchone()[0]
        assert n == 0
    else:
        assert not (tmp_path / "broker.db").exists()


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://x", "mysql"),
        ("sqlite://", "sqlite://"),
        ("sqlite:///:memory:", ":memory:"),
        ("not a url at all", "not a url at all"),
        ("", "''"),
    ],
)
def test_bad_url_is_refused(url, needle):
    with pytest.raises(ConfigurationError) as err:
        open_store(url)
    assert needle in str(err.value)


# ---------------------------------------------------------------------------- revoke
def test_revoke_marks_the_jobs_of_a_task_and_claims_deliver_them_marked(store):
    now = time.time()
    due = store.enqueue("q", b"due", msg_id="t-due")
    store.enqueue("q", b"delayed", msg_id="t-later", run_at=now + 60)
    other = store.enqueue("q", b"other", msg_id="t-other")
    assert store.revoke(["t-due", "t-later", "t-unknown"]) == 2
    assert store.revoke(["t-due"]) == 0  # once
    assert store.revoked_among([due, other]) == {due}
    got = {d.msg_id: d.revoked for d in store.claim(["q"], 10)}
    assert got == {"t-due": True, "t-other": False}
    assert [j.msg_id for j in store.scheduled()] == ["t-later"]
    assert store.scheduled(queue="elsewhere") == []
