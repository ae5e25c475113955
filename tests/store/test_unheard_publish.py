"""Publishes that no waiter hears announce nothing (PostgreSQL, ``unheard`` in
queries.sql): a NOTIFY takes a lock at commit that every notifying commit of the server
waits for, so a publish skips it while no waiter holds the hearing locks (no worker
runs, or every worker is busy and quiet). A waiter starting to hear waits for the
publishes that found none, then claims: nothing published is missed.

A real PostgreSQL; each test in its own schema (its own channel and lockspace). What
the publisher announces is read on a raw LISTEN connection, which holds no hearing lock.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from kombu_alkstore.store import NewJob
from kombu_alkstore.store.ambient import bound_connection
from kombu_alkstore.store.postgres import inserts


@pytest.fixture
def store(pg_target):
    with pg_target.open() as store:
        store.queue_declare("q")
        yield store


@pytest.fixture
def raw(pg_target, store):
    """A LISTEN on the store's channel that holds no hearing lock."""
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute(f'LISTEN "{store.statements.channel}"')
        yield conn


def _heard(conn: psycopg.Connection) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=0.5)]


# Each test publishes plain jobs and jobs with a unique key (statement insert_unique),
# each job its own key.
unique = pytest.mark.parametrize("unique", [False, True], ids=["plain", "unique"])


def _job(body: bytes, unique: bool) -> NewJob:
    return NewJob("q", body, unique_key=body.decode() if unique else None)


@unique
def test_a_publish_no_waiter_hears_announces_nothing(store, raw, unique):
    store.publish([_job(b"unheard", unique)])
    assert _heard(raw) == []
    (got,) = store.claim(["q"], 1)  # it is there all the same
    assert got.body == b"unheard"


@unique
def test_a_publish_is_announced_while_a_waiter_hears_and_not_while_it_is_quiet(store, raw, unique):
    waiter = store.waiter()
    try:
        store.publish([_job(b"heard", unique)])
        assert len(_heard(raw)) == 1
        assert waiter.wait(2).queues == {"q"}
        waiter.hear_wakeups(False)  # quiet: a busy worker's
        store.publish([_job(b"quiet", unique)])
        assert _heard(raw) == []
        waiter.hear_wakeups(True)
        store.publish([_job(b"again", unique)])
        assert len(_heard(raw)) == 1
    finally:
        waiter.close()
    store.publish([_job(b"closed", unique)])  # its connection gone, its locks with it
    assert _heard(raw) == []


@unique
def test_a_publish_in_the_callers_transaction_is_announced(store, raw, pg_target, unique):
    """There the hearing key would be held until the caller commits, and the waiters
    starting to hear would wait that long: such a publish always announces."""
    with psycopg.connect(pg_target.url) as conn, bound_connection(conn):
        store.publish([_job(b"in a transaction", unique)])
        conn.commit()
    assert len(_heard(raw)) == 1


@unique
def test_a_waiter_starting_to_hear_waits_for_a_publish_that_found_none(store, pg_target, unique):
    """The order that loses nothing: the publish took its hearing key before the waiter
    took the keys, so the waiter waits for its commit, and the claim it then makes finds
    the job (a publish after the waiter took them would announce it)."""
    waiter = store.waiter()
    waiter.hear_wakeups(False)
    publisher = psycopg.connect(pg_target.url)  # the insert held open in a transaction
    try:
        params = store._insert_params(_job(b"racing", unique).checked())
        publisher.execute(store._sql["insert_unique" if unique else "insert"], params)
        hearing = threading.Thread(target=waiter.hear_wakeups, args=(True,))
        hearing.start()
        hearing.join(0.5)
        assert hearing.is_alive(), "the waiter heard again before the publish committed"
        publisher.commit()
        hearing.join(5)
        assert not hearing.is_alive()
        (got,) = store.claim(["q"], 1)
        assert got.body == b"racing"
    finally:
        publisher.close()
        waiter.close()


def test_after_a_publish_nobody_heard_the_next_reads_no_offer_and_the_one_after_does(store):
    """While nobody hears, no worker is idle and a publish reads no offer
    (``insert_pending``); the first publish after an idle worker starts hearing is
    announced to it rather than handed off, and the one after that is handed off."""
    store.publish([NewJob("q", b"nobody")])  # heard by nobody
    waiter = store.waiter()  # an idle worker: hears, and offers a slot
    try:
        store._run("register", {"pid": waiter.address, "chan": 7, "queues": ["q"], "slots": 2})
        store.publish([NewJob("q", b"announced")])
        first = waiter.wait(5)
        assert (first.queues, first.handoffs) == ({"q"}, [])
        store.publish([NewJob("q", b"handed off")])
        [(chan, delivery)] = waiter.wait(5).handoffs
        assert (chan, delivery.body) == (7, b"handed off")
    finally:
        waiter.close()
    assert sorted(j.body for j in store.claim(["q"], 5)) == [b"announced", b"nobody"]


def test_a_publisher_looks_for_offers_again_while_nobody_hears(store, monkeypatch):
    """A worker of a version before the hearing locks offers slots and never hears (here
    a quiet waiter with an offer): a publisher whose publishes nobody hears still looks
    for offers every RECHECK seconds, so such a worker gets hand-offs."""
    monkeypatch.setattr(inserts, "RECHECK", 0.3)
    waiter = store.waiter()
    try:
        waiter.hear_wakeups(False)
        store.publish([NewJob("q", b"nobody")])  # looked, found no offer, nobody heard
        store._run("register", {"pid": waiter.address, "chan": 7, "queues": ["q"], "slots": 2})
        store.publish([NewJob("q", b"pending")])  # within RECHECK: no look
        assert waiter.wait(0.5).handoffs == []
        time.sleep(0.35)
        store.publish([NewJob("q", b"handed off")])
        [(chan, delivery)] = waiter.wait(5).handoffs
        assert (chan, delivery.body) == (7, b"handed off")
    finally:
        waiter.close()
