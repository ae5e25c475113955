"""Queues that outlive their consumer on AMQP brokers only as long as they are used:
an auto_delete queue on a fanout exchange (kombu's ``Broadcast``, named anew at each
worker start) is dropped with its binding once unused for the expiry grace, so a
restarted worker's old one stops collecting every broadcast; other auto_delete queues
(rpc:// reply queues, whose clients may not consume all the time) are kept."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid

from kombu import Connection, Exchange, Queue
from kombu.common import Broadcast

import kombu_alkstore  # noqa: F401
from tests.helpers import make_app, options_env, read_record, wait_for, worker_process


def test_a_broadcast_queue_goes_once_unused_and_a_plain_auto_delete_one_stays(target):
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        bcast = Broadcast("bc")
        reply = Queue("reply-q", Exchange("replies", "direct"), "reply-q", auto_delete=True)
        consumer = conn.Consumer([bcast, reply], callbacks=[lambda body, message: None])
        with consumer, conn.Producer() as producer:
            producer.publish({"n": 1}, exchange="bc", declare=[Exchange("bc", "fanout")])
    with target.open(queue_expiry_grace=0) as store:
        assert store.queue_exists(bcast.name) and store.size(bcast.name) == 1
        time.sleep(1.2)  # unused for its (shortest) expiry, the grace being 0 here
        store.maintain_round()
        assert not store.queue_exists(bcast.name)  # its binding and message with it
        assert store.queue_exists("reply-q")
    # A later broadcast reaches no dropped queue.
    with (
        Connection(target.broker_url, transport_options=target.transport_options) as conn,
        conn.Producer() as producer,
    ):
        producer.publish({"n": 2}, exchange="bc", declare=[Exchange("bc", "fanout")])
    with target.open() as store:
        assert not store.queue_exists(bcast.name)
        assert [c.queue for c in store.counts() if c.pending] == []


def test_a_solo_worker_keeps_its_pidbox_through_a_long_task(target, tmp_path):
    """A solo worker runs each task in its event loop's thread; its queues are refreshed
    from the housekeeping thread, so a task longer than the expiry grace plus a sweep
    leaves it still answering ``inspect``/``control`` (issue 29, defect 2: its pidbox was
    dropped, with its binding, and the worker stayed deaf until restarted)."""
    record = tmp_path / "record.txt"
    node = f"solo-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    env = options_env(queue_expiry_grace=2, sweep_interval=1)
    app = make_app(target)
    with worker_process(target, record, "--pool", "solo", "-n", node, **env):
        wait_for(lambda: app.control.ping([node], timeout=1), 60)
        app.send_task("tests.apps.proj.mark", ("long",), {"sleep": 14})
        # Another worker's maintenance rounds (this one's loop is busy with the task).
        with target.open(queue_expiry_grace=2) as store:
            while not any(r[0] == "long" for r in read_record(record)):
                store.maintain_round()
                time.sleep(0.5)
            assert store.queue_exists(f"{node}.celery.pidbox")
        assert app.control.ping([node], timeout=3), "the worker no longer hears control"


def test_a_frozen_worker_declares_its_dropped_queues_again(target, tmp_path):
    """A worker frozen longer than its queues' expiry (SIGSTOP here; a paused VM, a
    debugger) finds them dropped by another worker's round when it runs again: its next
    sweep declares them again with their bindings, so it answers ``control`` again
    without a restart (issue 29, defect 2)."""
    record = tmp_path / "record.txt"
    node = f"frozen-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    env = options_env(queue_expiry_grace=2, sweep_interval=1)
    app = make_app(target)
    pidbox = f"{node}.celery.pidbox"
    with worker_process(target, record, "--pool", "threads", "-n", node, **env) as proc:
        wait_for(lambda: app.control.ping([node], timeout=1), 60)
        os.killpg(proc.pid, signal.SIGSTOP)
        try:
            with target.open(queue_expiry_grace=2) as store:  # another worker's rounds
                wait_for(lambda: store.maintain_round() and not store.queue_exists(pidbox), 30)
        finally:
            os.killpg(proc.pid, signal.SIGCONT)
        with target.open() as store:
            wait_for(lambda: store.queue_exists(pidbox), 15)
        assert wait_for(lambda: app.control.ping([node], timeout=1), 15)
