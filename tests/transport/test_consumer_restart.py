"""A Celery consumer that restarts on a recoverable error raised outside the transport's
own event-loop calls (its connection never marked lost): Celery collects the connection
first, so nothing is handed back while acks_late tasks still run, and every task runs
once (fails if a collected connection's channels still restore their unacked messages)."""

from __future__ import annotations

import collections
import threading
import time

import psycopg

from tests.helpers import make_app, thread_worker, wait_for


def test_a_consumer_restart_does_not_hand_back_running_tasks(target):
    app = make_app(target, task_acks_late=True, worker_prefetch_multiplier=2)
    runs: collections.Counter = collections.Counter()
    started = threading.Event()

    @app.task(shared=False)
    def slow(i):
        runs[i] += 1
        started.set()
        time.sleep(2.0)

    with thread_worker(app, concurrency=2) as worker:
        for i in range(8):
            slow.delay(i)
        assert started.wait(20)
        time.sleep(0.3)  # two running, two more prefetched

        def boom():  # e.g. a store call Celery makes itself, a reject's requeue
            raise psycopg.OperationalError("injected: a connection error outside the loop's calls")

        worker.hub.call_soon(boom)
        wait_for(lambda: len(runs) == 8, 60)
        time.sleep(3)  # a second run of any task would start by now
        with target.open() as store:
            wait_for(
                lambda: all(c.pending == c.processing == 0 for c in store.counts(["celery"])), 30
            )
    assert dict(runs) == {i: 1 for i in range(8)}
