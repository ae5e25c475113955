"""Celery on the transport, with a real worker in a thread (both engines)."""

from __future__ import annotations

import threading
import time

import pytest
from celery.exceptions import Reject
from kombu import Exchange, Queue

from tests.helpers import make_app, thread_worker, wait_for


def dead_job(store, task_id):
    job = store.get_job(task_id)
    return job if job is not None and job.state == "dead" else None


@pytest.mark.parametrize("async_claims", [True, False], ids=["async-claims", "blocking-claims"])
def test_roundtrip_200_tasks_with_args_kwargs_and_rpc_results(target, async_claims):
    app = make_app(target, transport_options={"async_claims": async_claims})

    @app.task(shared=False)
    def combine(a, b, *, sep="-", extra=None):
        return f"{a}{sep}{b}{sep}{extra['k']}"

    with thread_worker(app) as worker:
        claims = worker.consumer.connection.transport.claims
        assert (claims is not None) == (async_claims and target.engine == "postgresql")
        results = [combine.delay(i, "x", sep=":", extra={"k": "ü"}) for i in range(200)]
        values = [r.get(timeout=30) for r in results]
    assert values == [f"{i}:x:ü" for i in range(200)]
    with target.open() as store:
        assert [c for c in store.counts(["celery"]) if c.pending or c.processing] == []


def test_pipelined_publishes_and_results_roundtrip(target):
    """confirm_publish=False: the client's and the worker's (rpc result) publishes are
    pipelined on PostgreSQL (a no-op on SQLite); every task runs once, every result returns."""
    app = make_app(target, transport_options={"confirm_publish": False})

    @app.task(shared=False)
    def square(i):
        return i * i

    with thread_worker(app):
        results = [square.delay(i) for i in range(300)]
        assert [r.get(timeout=30) for r in results] == [i * i for i in range(300)]
    with target.open() as store:
        assert [c for c in store.counts(["celery"]) if c.pending or c.processing] == []


def test_countdown_tasks_run_once_on_time_with_short_visibility(target):
    app = make_app(target, transport_options={"visibility_timeout": 2})
    runs: list[tuple[int, float]] = []

    @app.task(shared=False)
    def stamp(i):
        runs.append((i, time.time()))

    with thread_worker(app):
        sent = time.time()
        for i in range(20):
            stamp.apply_async((i,), countdown=3)
        wait_for(lambda: len(runs) >= 20, 20)
        time.sleep(3)  # twice the visibility timeout: nothing may run again
    assert sorted(i for i, _ in runs) == list(range(20))
    lateness = [t - (sent + 3) for _, t in runs]
    assert min(lateness) >= -0.05, lateness
    assert max(lateness) < 1.5, lateness


def test_priority_higher_first_with_one_slot(target):
    app = make_app(target, worker_prefetch_multiplier=1)
    order: list[int] = []

    @app.task(shared=False)
    def pri(p):
        order.append(p)

    # Queue everything first, so the single slot sees the whole backlog.
    for p in [1, 9, 5, 200, 0, 7, 255, 3]:
        pri.apply_async((p,), priority=p)
    with thread_worker(app, concurrency=1):
        wait_for(lambda: len(order) == 8, 15)
    assert order == [255, 200, 9, 7, 5, 3, 1, 0]


def test_reject_without_requeue_is_a_dead_letter(target):
    app = make_app(target, task_acks_late=True)

    @app.task(bind=True, shared=False)
    def refuse(self):
        raise Reject("bad 7", requeue=False)

    with thread_worker(app):
        result = refuse.delay()
        unknown = app.send_task("no.such.task")
        with target.open() as store:
            job = wait_for(lambda: dead_job(store, result.id), 15)
            assert job.last_error == "rejected: bad 7"  # the reason Celery knows, kept
            wait_for(lambda: dead_job(store, unknown.id), 15)
            job = wait_for(
                lambda: (j := dead_job(store, unknown.id)).last_error != "rejected" and j, 5
            )
            assert job.last_error == "rejected: unregistered task 'no.such.task'"


def test_undecodable_body_is_dead_lettered_and_next_task_runs(target):
    app = make_app(target)
    ran = threading.Event()

    @app.task(shared=False)
    def fine():
        ran.set()

    with thread_worker(app):
        with app.connection_for_write() as conn:
            producer = conn.Producer()
            producer.publish(
                b"{not json",
                routing_key="celery",
                content_type="application/json",
                content_encoding="utf-8",
                headers={"task": fine.name, "id": "bad-body-1"},
            )
        fine.delay()
        assert ran.wait(15)
        with target.open() as store:
            job = wait_for(lambda: dead_job(store, "bad-body-1"), 15)
    assert "undecodable" in job.last_error


def test_direct_and_topic_routing_with_named_queues(target):
    app = make_app(target)
    seen: list[tuple[str, str]] = []
    topic = Exchange("orders", type="topic")
    app.conf.task_queues = [
        Queue("celery"),
        Queue("eu-orders", topic, routing_key="order.eu.*"),
        Queue("all-orders", topic, routing_key="order.#"),
    ]

    @app.task(bind=True, shared=False)
    def where(self, tag):
        seen.append((tag, self.request.delivery_info["routing_key"]))

    with thread_worker(app):
        where.apply_async(("eu",), exchange=topic, routing_key="order.eu.paris")
        where.apply_async(("us",), exchange=topic, routing_key="order.us.nyc")
        wait_for(lambda: len(seen) >= 3, 15)
        time.sleep(0.5)
    assert sorted(t for t, _ in seen) == ["eu", "eu", "us"]


def test_queues_with_long_and_unicode_names(target):
    app = make_app(target)
    name = "ünï-'quote\"-" + "k8s-worker-host-" * 10
    app.conf.task_queues = [Queue(name)]
    app.conf.task_default_queue = name

    @app.task(shared=False)
    def echo(x):
        return x

    with thread_worker(app):
        assert echo.delay("ok").get(timeout=15) == "ok"
        assert app.control.inspect(timeout=3).ping()


def test_events_receiver_gets_task_succeeded(target):
    app = make_app(target, worker_send_task_events=True)
    got = threading.Event()

    @app.task(shared=False)
    def quick():
        return 1

    def listen():
        with app.connection_for_read() as conn:
            recv = app.events.Receiver(conn, handlers={"task-succeeded": lambda e: got.set()})
            for _ in recv.itercapture(limit=None, timeout=15, wakeup=False):
                if got.is_set():
                    return

    listener = threading.Thread(target=listen, daemon=True)
    with thread_worker(app):
        listener.start()
        time.sleep(1.0)  # let the receiver bind its queue
        quick.delay().get(timeout=15)
        assert got.wait(15)


def test_purge_and_passive_declare_counts(target):
    app = make_app(target)

    @app.task(shared=False)
    def noop():
        pass

    for _ in range(7):
        noop.delay()
    with app.connection_for_write() as conn:
        ch = conn.default_channel
        assert ch.queue_declare("celery", passive=True).message_count == 7
        assert app.control.purge() == 7
        assert ch.queue_declare("celery", passive=True).message_count == 0
