"""Transactional publish with a real Celery worker in a thread, on both engines.

A task published under ``kombu_alkstore.transaction(conn)`` is a row written on the
caller's connection: it reaches a worker when the caller commits, never if it rolls back.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest
from celery import chain, chord, group

import kombu_alkstore
from kombu_alkstore.errors import ConfigurationError
from tests.helpers import make_app, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)


def _recording_app(target, **conf):
    app = make_app(target, **conf)
    ran: list = []
    lock = threading.Lock()

    @app.task(name="t.mark", shared=False)
    def mark(key):
        with lock:
            ran.append(key)
        return key

    return app, mark, ran


def test_commit_runs_the_task_once_at_commit_and_it_sees_the_row(target, biz):
    app = make_app(target)
    seen: list = []

    @app.task(shared=False)
    def receipt(order_id, item):
        seen.append((order_id, item in biz.items(), time.time()))

    with thread_worker(app), target.open() as store, closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            order_id = biz.insert(conn, "book")
            receipt.delay(order_id, "book")
        # Out of the block the caller's transaction is still open (it is the caller's).
        time.sleep(1.0)  # the worker is idle and listening: nothing may reach it yet
        assert seen == []
        assert biz.live(store) == 0  # the broker's own connection sees no message
        committed = time.time()
        conn.commit()
        wait_for(lambda: seen, 10, 0.01)
        time.sleep(1.5)  # and it runs once
    assert [(o, saw) for o, saw, _ in seen] == [(order_id, True)]
    # Woken by the commit itself (NOTIFY / data_version), not by the 5 s safety-net poll.
    assert seen[0][2] - committed < 2.0


def test_rollback_publishes_nothing(target, biz):
    app, mark, ran = _recording_app(target)
    with thread_worker(app), target.open() as store, closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            biz.insert(conn, "ghost")
            mark.delay("single")
            mark.apply_async(("eta",), countdown=1)
            group(mark.s(f"g{i}") for i in range(5)).apply_async()
            chain(mark.si("c1"), mark.si("c2")).apply_async()
        conn.rollback()
        time.sleep(2.5)  # past the countdown, with the worker polling
        assert ran == []
        assert sum(c.pending + c.delayed + c.processing for c in store.counts()) == 0
        assert biz.items() == []
        # The same connection goes on working: the next transaction commits.
        with kombu_alkstore.transaction(conn):
            mark.delay("after")
        conn.commit()
        wait_for(lambda: ran == ["after"], 10)


def test_savepoint_rolled_back_inside_a_committed_transaction(target, biz):
    app, mark, ran = _recording_app(target)
    with thread_worker(app), closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            biz.insert(conn, "kept")
            mark.delay("outer-1")
            with biz.savepoint(conn, rollback=True):
                biz.insert(conn, "dropped")
                mark.delay("inner-rolled-back")
                group(mark.s(f"inner-g{i}") for i in range(3)).apply_async()
            with biz.savepoint(conn, rollback=False):
                mark.delay("inner-released")
            mark.delay("outer-2")
        conn.commit()
        wait_for(lambda: len(ran) >= 3, 10)
        time.sleep(1.5)
    assert sorted(ran) == ["inner-released", "outer-1", "outer-2"]
    assert biz.items() == ["kept"]


def test_group_of_100_appears_all_at_once(target, biz):
    app, mark, ran = _recording_app(target)
    with target.open() as store, closing(biz.connect()) as conn:
        seen: list[int] = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen.append(biz.live(store))
                time.sleep(0.002)

        watcher = threading.Thread(target=watch)
        with kombu_alkstore.transaction(conn):
            biz.insert(conn, "bulk")
            watcher.start()
            group(mark.s(i) for i in range(100)).apply_async()
            time.sleep(0.3)
            before = len(seen)
        conn.commit()
        time.sleep(0.3)
        stop.set()
        watcher.join()
    assert before > 10 and set(seen[:before]) == {0}, seen[:before]
    assert set(seen) == {0, 100}, sorted(set(seen))  # never a partial group
    assert seen[-1] == 100
    with thread_worker(app):
        wait_for(lambda: len(ran) == 100, 30)
    assert sorted(ran) == list(range(100))


def test_group_and_chain_commit_with_the_transaction(target, biz):
    app = make_app(target)
    out: list = []

    @app.task(shared=False)
    def add(x, y):
        return x + y

    @app.task(shared=False)
    def record(value, tag):
        out.append((tag, value))

    with thread_worker(app), closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            chain(add.s(1, 2), add.s(3), record.s("chain")).apply_async()
            group(record.s(i, "group") for i in range(10)).apply_async()
            time.sleep(0.5)
            assert out == []
        conn.commit()
        wait_for(lambda: len(out) == 11, 15)
    assert ("chain", 6) in out  # the chain's later links were published by the worker
    assert sorted(v for t, v in out if t == "group") == list(range(10))


def test_chord_header_commits_or_rolls_back_with_the_transaction(target, biz):
    app = make_app(target, result_backend="cache+memory://")
    totals: list = []

    @app.task(shared=False)
    def double(x):
        return 2 * x

    @app.task(shared=False)
    def total(values, tag):
        totals.append((tag, sum(values)))

    with thread_worker(app), closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            chord(double.s(i) for i in range(5))(total.s("rolled-back"))
        conn.rollback()
        with kombu_alkstore.transaction(conn):
            chord(double.s(i) for i in range(5))(total.s("committed"))
            time.sleep(0.5)
            assert totals == []
        conn.commit()
        wait_for(lambda: totals, 15)
        time.sleep(1.0)
    assert totals == [("committed", 20)]


def test_wrong_database_is_a_clear_error_and_nothing_is_published(target, biz, tmp_path):
    app, mark, ran = _recording_app(target)
    other = biz.other_database(tmp_path)
    with target.open() as store:
        started = time.monotonic()
        with kombu_alkstore.transaction(other), pytest.raises(ConfigurationError) as err:
            mark.delay("misrouted")
        assert time.monotonic() - started < 5  # refused, not retried as a connection error
        message = str(err.value)
        if target.engine == "postgresql":
            assert "'postgres'" in message  # theirs
            assert "/test" in message and target.schema in message  # the broker's
            assert "schema missing" in message
        else:
            assert "elsewhere.db" in message and "broker.db" in message
        # Nothing went through the broker's own connection instead.
        assert sum(c.pending + c.delayed + c.processing for c in store.counts()) == 0
        other.rollback()
        other.close()
        # Outside the block the same app publishes through the broker as usual.
        mark.delay("plain")
        assert biz.live(store) == 1


def test_wrong_kind_of_connection_is_a_clear_error(target, biz, tmp_path):
    app, mark, _ = _recording_app(target)
    if target.engine == "postgresql":
        import sqlite3

        other = sqlite3.connect(str(tmp_path / "x.db"))
        expected = "not a PostgreSQL connection"
    else:
        import psycopg

        from tests.conftest import PG_URL

        other = psycopg.connect(PG_URL)
        expected = "not an sqlite3 connection"
    with kombu_alkstore.transaction(other), pytest.raises(ConfigurationError, match=expected):
        mark.delay("x")
    other.close()


def test_autocommit_connection_is_refused_until_a_transaction_is_open(target, biz):
    app, mark, _ = _recording_app(target)
    with target.open() as store:
        if target.engine == "postgresql":
            conn = biz.connect(autocommit=True)
        else:
            conn = biz.connect(isolation_level=None)
        with (
            kombu_alkstore.transaction(conn),
            pytest.raises(ConfigurationError, match="autocommit mode"),
        ):
            mark.delay("would-commit-alone")
        assert biz.live(store) == 0
        if target.engine == "postgresql":
            with conn.transaction():
                with kombu_alkstore.transaction(conn):
                    mark.delay("in-an-explicit-transaction")
                assert biz.live(store) == 0
        else:
            conn.execute("BEGIN")
            with kombu_alkstore.transaction(conn):
                mark.delay("in-an-explicit-transaction")
            assert biz.live(store) == 0
            conn.execute("COMMIT")
        assert biz.live(store) == 1
        conn.close()


def test_binding_is_per_thread(target, biz):
    app, mark, ran = _recording_app(target)
    with thread_worker(app), closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            mark.delay("inside")
            other = threading.Thread(target=lambda: mark.delay("other-thread"))
            other.start()
            # PostgreSQL: published at once. SQLite: it waits for this transaction's
            # write lock, through the broker's own connection, not this one.
            other.join(timeout=1.0)
        conn.rollback()
        other.join(timeout=20)
        assert not other.is_alive()
        wait_for(lambda: ran, 10)
        time.sleep(1.0)
    assert ran == ["other-thread"]
