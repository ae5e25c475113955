"""SQLite: the caller's transaction holds the database write lock; publishing inside it
must not wait for a second writer, and workers in the same process must carry on."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest

import kombu_alkstore
from tests.helpers import make_app, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)


def test_publish_under_the_callers_write_lock_does_not_wait(sqlite_target, sqlite_biz):
    biz = sqlite_biz
    app = make_app(sqlite_target)
    ran: list = []
    started = threading.Event()

    @app.task(shared=False)
    def slow():
        started.set()
        time.sleep(1.0)
        ran.append("slow")

    @app.task(shared=False)
    def mark(i):
        ran.append(i)

    with thread_worker(app), sqlite_target.open() as store, closing(biz.connect()) as conn:
        slow.delay()
        assert started.wait(10)
        # Legacy isolation mode: this INSERT begins a transaction and takes the write lock.
        biz.insert(conn, "locked")
        assert conn.in_transaction
        time.sleep(1.5)  # the slow task ends meanwhile; its ack waits for the lock
        t0 = time.monotonic()
        with kombu_alkstore.transaction(conn):
            for i in range(50):
                mark.delay(i)
        publish_time = time.monotonic() - t0
        assert biz.live(store) == 1  # only the slow task's row, still unacked
        conn.commit()
        wait_for(lambda: len(ran) == 51, 20)
        time.sleep(1.0)
        assert biz.live(store) == 0  # the slow task's ack landed after the commit
    assert publish_time < 2.0, publish_time  # never the 30 s busy timeout of a 2nd writer
    assert ran.count("slow") == 1
    assert sorted(i for i in ran if i != "slow") == list(range(50))
