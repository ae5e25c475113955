"""``rpc://`` results through the broker, from a ``celery worker`` subprocess.

Two stalls (issue 29, item 6; issue 28): with ``task_acks_late`` and
``worker_prefetch_multiplier=1`` on PostgreSQL, tasks waited for the safety-net poll
(a wake-up for the reply queue made the worker forget that its task channel had work
waiting, so the slot an ack freed claimed nothing); and Celery before 5.7, which drains
once before it looks at the results already delivered, waited for a drain to time out
for each result that ``drain_events`` had delivered with an earlier one.
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from celery import group
from celery.backends import asynchronous
from kombu import Connection, Exchange, Queue

from tests.helpers import make_app, read_record, wait_for, worker_process

#: The worker's safety-net poll here: a task or result that waits for it shows.
POLL = 30.0


def _worker_app(target, **conf):
    opts = dict(target.transport_options, polling_interval=POLL)
    app = make_app(target, transport_options=opts, **conf)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_BACKEND": "rpc://"}
    return app, env


def _started(app, record) -> None:
    assert app.send_task("tests.apps.proj.mark", ("warm",)).get(timeout=60) == "warm"
    assert read_record(record)


def test_groups_with_acks_late_and_prefetch_one_do_not_wait_for_the_poll(pg_target, tmp_path):
    """``examples/from_redis`` settings (acks late, prefetch multiplier 1), rpc:// results:
    before, a group of 10 took 10-30 s (the 10 s poll; here 30 s) in most runs."""
    app, env = _worker_app(pg_target)
    env.update(ALKSTORE_TEST_ACKS_LATE="1", ALKSTORE_TEST_PREFETCH="1")
    record = tmp_path / "record.tsv"
    with worker_process(pg_target, record, "-c", "2", log=tmp_path / "worker.log", **env):
        _started(app, record)
        took = []
        for rep in range(5):
            start = time.monotonic()
            keys = [f"g{rep}-{i}" for i in range(10)]
            sigs = group(app.signature("tests.apps.proj.mark", (k,)) for k in keys)
            assert sigs.apply_async().get(timeout=2 * POLL) == keys
            took.append(round(time.monotonic() - start, 2))
        assert max(took) < 5, took  # each 0.03-0.09 s here


def _celery_5_4_drain_events_until(self, p, timeout=None, interval=1, on_interval=None, wait=None):
    """``celery.backends.asynchronous.Drainer.drain_events_until`` of Celery 5.4-5.6
    (copied): it drains before it looks whether ``p`` is ready."""
    wait = wait or self.result_consumer.drain_events
    time_start = time.monotonic()
    while 1:
        if timeout and time.monotonic() - time_start >= timeout:
            raise TimeoutError()
        with contextlib.suppress(TimeoutError):
            yield self.wait_for(p, wait, timeout=interval)
        if on_interval:
            on_interval()
        if p.ready:
            break


def test_results_waited_for_as_celery_before_5_7_does(target, tmp_path, monkeypatch):
    """20 ``delay()``, then their ``get()`` once all have run, with Celery 5.4's result
    wait: before, the first drain delivered all 20 and each later ``get()`` waited for a
    drain to time out (19 s; 14-18 s with results still coming). One worker process,
    so the results come in the order they are waited for."""
    monkeypatch.setattr(asynchronous.Drainer, "drain_events_until", _celery_5_4_drain_events_until)
    app, env = _worker_app(target)
    record = tmp_path / "record.tsv"
    with worker_process(target, record, "-c", "1", **env):
        _started(app, record)
        results = [app.send_task("tests.apps.proj.mark", (f"d{i}",)) for i in range(20)]
        wait_for(lambda: len(read_record(record)) == 21, 30)
        start = time.monotonic()
        assert [r.get(timeout=60) for r in results] == [f"d{i}" for i in range(20)]
        took = time.monotonic() - start
    assert took < 3, f"20 results took {took:.2f} s"


@pytest.fixture
def drained(target):
    """A consumer of "q" (acks) on a connection that drains, with 5 messages waiting:
    ``(connection, messages received)``."""
    options = dict(target.transport_options, visibility_timeout=60)
    with (
        Connection(target.broker_url, transport_options=options) as conn,
        Connection(target.broker_url, transport_options=options) as publisher,
    ):
        queue = Queue("q", Exchange(""), routing_key="q")
        producer = publisher.Producer()
        for i in range(5):
            producer.publish({"n": i}, routing_key="q", declare=[queue])
        got: list = []
        consumer = conn.Consumer([queue], callbacks=[lambda body, message: got.append(message)])
        consumer.qos(prefetch_count=10)
        consumer.consume()
        yield conn, got


def test_drain_events_delivers_one_message_per_call(drained):
    """As AMQP's: one per call, the batch claimed once; then a call waits for its
    timeout. Never a return without a message: kombu's mailbox and ``eventloop`` count
    calls as messages."""
    conn, got = drained
    claims = 0
    store = conn.transport.store
    claim = store.claim

    def counted(*args, **kwargs):
        nonlocal claims
        claims += 1
        return claim(*args, **kwargs)

    store.claim = counted
    for n in range(5):
        start = time.monotonic()
        conn.drain_events(timeout=2)
        assert [m.payload["n"] for m in got] == list(range(n + 1))
        assert time.monotonic() - start < 1
    assert claims == 1  # the batch of 5 was claimed once
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        conn.drain_events(timeout=1)
    assert time.monotonic() - start >= 1
    assert len(got) == 5
    for message in got:
        message.ack()


def test_a_closed_channel_hands_back_the_messages_it_kept(drained, target):
    """Messages claimed with the one delivered and kept for the next drains go back at
    close, their attempt refunded, not held until their visibility timeout."""
    conn, got = drained
    conn.drain_events(timeout=2)
    assert len(got) == 1
    got[0].ack()
    conn.transport.acks.flush()
    conn.default_channel.close()
    with target.open() as store:
        wait_for(lambda: len(store.claim(["q"], 10)) == 4, 5)
