"""Enqueue and publish: bodies, fields, delays, stamps, and the jobs refused."""

from __future__ import annotations

import math
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob
from tests.store.conformance.helpers import EPS, claim_one


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
