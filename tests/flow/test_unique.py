"""Unique tasks (issue 32, docs/flow-control.md), on both engines.

A publish carrying a unique key (header ``alkstore_unique``, or the task's
``alkstore_unique`` option) is not enqueued while a job with that key is live in its
queue in the states that count; once that job is acked, dead-lettered or expired, the key
is free again. Publishes go through Celery (``apply_async``) on the real transport.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from contextlib import closing

import psycopg
import pytest

import kombu_alkstore
from kombu_alkstore.errors import ConfigurationError
from tests.helpers import make_app, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)

KEY = "alkstore_unique"
STATES = "alkstore_unique_states"


def live(store, queue: str = "celery") -> int:
    """Jobs of ``queue`` in any live state (pending, delayed, claimed)."""
    return sum(c.pending + c.delayed + c.processing for c in store.counts([queue]))


def producer_app(target, **transport_options):
    app = make_app(target, transport_options=transport_options)

    @app.task(name="t.work", shared=False)
    def work(i=0):
        return i

    @app.task(name="t.refresh", shared=False, alkstore_unique=True)
    def refresh(user_id, full=False):
        return user_id

    return app, work, refresh


def test_a_duplicate_while_pending_delayed_or_claimed_is_not_enqueued(target, caplog):
    app, work, _ = producer_app(target)
    with target.open() as store, caplog.at_level(logging.INFO, logger="kombu_alkstore"):
        first = work.apply_async((1,), headers={KEY: "k-pending"})
        second = work.apply_async((2,), headers={KEY: "k-pending"})
        assert live(store) == 1
        holder = store.unique_holder("celery", "k-pending")
        assert holder is not None and holder.msg_id == first.id and holder.state == "pending"
        # The second publish is logged at INFO, naming the live job and its task id.
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert any(second.id in line and first.id in line for line in lines), lines
        assert kombu_alkstore.unique.live_task_id(app, "celery", "k-pending") == first.id

        # Delayed: a countdown job holds its key; a due publish of it is not enqueued.
        delayed = work.apply_async((3,), countdown=60, headers={KEY: "k-delayed"})
        work.apply_async((4,), headers={KEY: "k-delayed"})
        work.apply_async((5,), countdown=30, headers={KEY: "k-delayed"})
        [counts] = store.counts(["celery"])
        assert (counts.pending, counts.delayed) == (1, 1)
        assert store.unique_holder("celery", "k-delayed").msg_id == delayed.id

        # Claimed: the job a worker holds keeps its key (the default states).
        claimed = store.claim(["celery"], 10)
        assert [d.msg_id for d in claimed] == [first.id]
        work.apply_async((6,), headers={KEY: "k-pending"})
        assert live(store) == 2
        assert store.unique_holder("celery", "k-pending").state == "processing"

        # The same key in another queue is another key; no key is never unique.
        work.apply_async((7,), queue="other", headers={KEY: "k-pending"})
        work.apply_async((8,))
        work.apply_async((8,))
        assert live(store, "other") == 1
        assert live(store) == 4


def test_after_ack_dead_letter_or_expiry_the_key_is_free_again(target):
    app, work, _ = producer_app(target)
    with target.open() as store:
        work.apply_async(headers={KEY: "k"})
        [d] = store.claim(["celery"])
        assert store.ack([d]) == {d.id}
        again = work.apply_async(headers={KEY: "k"})
        assert live(store) == 1 and store.unique_holder("celery", "k").msg_id == again.id

        [d] = store.claim(["celery"])
        store.fail([d], "rejected")  # dead-lettered
        assert store.unique_holder("celery", "k") is None
        third = work.apply_async(headers={KEY: "k"})
        assert store.unique_holder("celery", "k").msg_id == third.id

        [d] = store.claim(["celery"])
        store.ack([d])
        work.apply_async(headers={KEY: "x"}, expires=0.2)
        time.sleep(0.5)
        store.maintain("expire")  # the expired job goes to the dead letters
        assert live(store) == 0
        fourth = work.apply_async(headers={KEY: "x"})
        assert store.unique_holder("celery", "x").msg_id == fourth.id


def test_states_pending_and_delayed_free_the_key_at_the_claim(target):
    app, work, _ = producer_app(target)
    waiting = {KEY: "w", STATES: ["pending", "delayed"]}
    with target.open() as store:
        first = work.apply_async(headers=waiting)
        work.apply_async(headers=waiting)
        assert live(store) == 1
        [d] = store.claim(["celery"])
        assert d.msg_id == first.id
        # Once claimed it no longer holds the key: a new publish is enqueued, and held.
        second = work.apply_async(headers=waiting)
        work.apply_async(headers={KEY: "w", STATES: "pending,delayed"})
        assert live(store) == 2
        assert store.unique_holder("celery", "w").msg_id == second.id
        # The claimed one retried (pending again) holds no key: no conflict, both live.
        assert store.retry([d], delay=0) == {d.id}
        assert live(store) == 2
        assert store.unique_holder("celery", "w").msg_id == second.id


def test_the_task_default_key_is_the_name_and_arguments(target):
    app, _, refresh = producer_app(target)
    with target.open() as store:
        a = refresh.delay(7)
        refresh.delay(7)
        refresh.apply_async((7,))
        b = refresh.delay(7, full=True)  # other arguments: another key
        c = refresh.delay(8)
        assert live(store) == 3
        key = kombu_alkstore.unique.key_for("t.refresh", [7], {})
        assert store.unique_holder("celery", key).msg_id == a.id
        held = {
            store.unique_holder("celery", kombu_alkstore.unique.key_for("t.refresh", *k)).msg_id
            for k in ([[7], {"full": True}], [[8], {}])
        }
        assert held == {b.id, c.id}
        # A header given to the call wins: None publishes without a key.
        refresh.apply_async((7,), headers={KEY: None})
        refresh.apply_async((7,), headers={KEY: "mine"})
        refresh.apply_async((7,), headers={KEY: "mine"})
        assert live(store) == 5
        # The apply_async option spelling (Celery makes it a message property).
        opt = refresh.apply_async(
            (9,), alkstore_unique="opt", alkstore_unique_states="pending,delayed"
        )
        refresh.apply_async((9,), alkstore_unique="opt")
        assert live(store) == 6 and store.unique_holder("celery", "opt").msg_id == opt.id
        [d] = [d for d in store.claim(["celery"], 10) if d.msg_id == opt.id]
        assert store.unique_holder("celery", "opt") is None  # pending + delayed: freed


def test_bad_values_are_refused_naming_the_option(target):
    app, work, _ = producer_app(target)

    @app.task(name="t.badkey", shared=False, alkstore_unique=lambda args, kwargs: 42)
    def badkey():
        pass

    cases = [
        ({KEY: 5}, r"alkstore_unique must be a string .* got int 5"),
        ({KEY: ""}, r"alkstore_unique must not be empty"),
        ({KEY: "x" * 513}, r"alkstore_unique is 513 characters long; at most 512"),
        (
            {KEY: "k", STATES: ["pending", "runnin"]},
            r"alkstore_unique_states: unknown state 'runnin'",
        ),
        ({KEY: "k", STATES: ["claimed"]}, r"alkstore_unique_states must be all of pending"),
        ({KEY: "k", STATES: 3}, r"alkstore_unique_states must be a list of state names"),
    ]
    with target.open() as store:
        for headers, message in cases:
            with pytest.raises(ConfigurationError, match=message):
                work.apply_async(headers=headers, retry=False)
        with pytest.raises(ConfigurationError, match=r"alkstore_unique must be a string .* 42"):
            badkey.apply_async(retry=False)
        assert live(store) == 0


def _connect(target):
    if target.engine == "postgresql":
        return psycopg.connect(target.url)
    return sqlite3.connect(target.url[len("sqlite:///") :])


def test_a_key_held_by_a_rolled_back_transaction_is_free_afterwards(target):
    app, work, _ = producer_app(target)
    with target.open() as store, closing(_connect(target)) as conn:
        with kombu_alkstore.transaction(conn):
            work.apply_async(headers={KEY: "tx"})
            work.apply_async(headers={KEY: "tx"})  # the same transaction: still one
        conn.rollback()
        assert live(store) == 0 and store.unique_holder("celery", "tx") is None
        after = work.apply_async(headers={KEY: "tx"})
        assert store.unique_holder("celery", "tx").msg_id == after.id
        # A committed transactional publish holds it like any other.
        with kombu_alkstore.transaction(conn):
            work.apply_async(headers={KEY: "tx2"})
        conn.commit()
        work.apply_async(headers={KEY: "tx2"})
        with kombu_alkstore.transaction(conn):
            work.apply_async(headers={KEY: "tx"})  # held by "after": not enqueued
        conn.commit()
        assert live(store) == 2


@pytest.mark.parametrize("ending", ["rollback", "commit"])
def test_a_publisher_waits_for_an_uncommitted_holder_of_its_key(target, ending):
    """A key held by a publish not yet committed: another publisher of it waits for that
    transaction, then enqueues its job if it rolled back and nothing if it committed."""
    import threading

    app, work, _ = producer_app(target)
    got: list = []
    with target.open() as store, closing(_connect(target)) as conn:
        with kombu_alkstore.transaction(conn):
            work.apply_async(headers={KEY: "held"})
        other = threading.Thread(
            target=lambda: got.append(store.enqueue("celery", b"{}", unique_key="held"))
        )
        other.start()
        time.sleep(0.8)
        assert other.is_alive() and got == []  # waiting for the caller's transaction
        getattr(conn, ending)()
        other.join(30)
        assert not other.is_alive()
        if ending == "rollback":
            assert got[0] is not None and store.unique_holder("celery", "held").id == got[0]
        else:
            assert got == [None] and live(store) == 1


def test_pipelined_and_batched_publishes_keep_one_per_key(target):
    """confirm_publish off (PostgreSQL's pipelined path; the same on SQLite): the keyed
    publishes are refused as duplicates, the others still all land, in order."""
    app, work, _ = producer_app(target, confirm_publish=False)
    with target.open() as store:
        for i in range(30):
            work.apply_async((i,))
            work.apply_async((i,), headers={KEY: f"p{i % 3}"})
        with app.connection_for_write() as conn:
            conn.default_channel  # noqa: B018 - the transport's store is the producers' one
            conn.transport.store.flush_publishes()
        assert live(store) == 33
        assert {store.unique_holder("celery", f"p{i}") is not None for i in range(3)} == {True}
        # A batch (one fanout-like enqueue_many) with a key twice: one of them.
        from kombu_alkstore.store import NewJob

        ids = store.enqueue_many(
            [
                NewJob("b", b"1", unique_key="z"),
                NewJob("b", b"2"),
                NewJob("b", b"3", unique_key="z"),
            ]
        )
        assert ids[0] is not None and ids[1] is not None and ids[2] is None
        assert live(store, "b") == 2


def _publish_at_once(broker_url, options, barrier, key, out):
    """One publisher process: a Celery app of its own, waits at the barrier, publishes."""
    from celery import Celery

    import kombu_alkstore  # noqa: F401

    app = Celery("p", broker=broker_url, set_as_current=False)
    app.conf.broker_transport_options = options
    with app.connection_for_write() as conn:
        conn.ensure_connection()
        conn.default_channel  # noqa: B018 - connected and the store open before the race
        with app.producer_or_acquire() as producer:
            barrier.wait(timeout=60)
            result = app.send_task("t.work", headers={KEY: key}, producer=producer)
    out.put(result.id)


def test_eight_publisher_processes_racing_on_one_key_enqueue_exactly_one(target):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with target.open() as store:
        for round_ in range(3):
            key = f"race-{round_}"
            barrier, out = ctx.Barrier(8), ctx.Queue()
            procs = [
                ctx.Process(
                    target=_publish_at_once,
                    args=(target.broker_url, target.transport_options, barrier, key, out),
                )
                for _ in range(8)
            ]
            for p in procs:
                p.start()
            ids = [out.get(timeout=90) for _ in procs]
            for p in procs:
                p.join(30)
                assert p.exitcode == 0
            assert len(set(ids)) == 8  # each publish returned (its own id)
            holder = store.unique_holder("celery", key)
            assert holder is not None and holder.msg_id in ids
            assert live(store) == round_ + 1  # exactly one per key


def test_a_real_worker_runs_a_unique_task_once_when_published_twice(target):
    app = make_app(target)
    runs: list[int] = []

    # acks_late: Celery acks a task when it starts otherwise, and an acked job holds no key.
    @app.task(name="t.once", shared=False, alkstore_unique=True, acks_late=True)
    def once(n):
        runs.append(n)
        time.sleep(1.0)
        return n

    with thread_worker(app), target.open() as store:
        first = once.delay(1)
        once.delay(1)
        wait_for(lambda: runs, 15, 0.02)
        once.delay(1)  # while it runs (claimed): not enqueued
        assert first.get(timeout=15) == 1
        wait_for(lambda: live(store) == 0, 10)
        time.sleep(1.5)
        assert runs == [1]
        # Done (acked): the key is free, the same call runs again.
        assert once.delay(1).get(timeout=15) == 1
        assert runs == [1, 1]
