"""Consumers without an event loop (``drain_events``) stay idle once a countdown passed.

kombu's SimpleQueue, ``celery events``, rpc:// clients, gevent and eventlet workers
drain; each wait was bounded by the earliest announced due time, which nothing cleared
once it had passed, so every wait after it returned at once: thousands of claims a
second on an idle connection (issue 29, item 7).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from kombu import Connection, Exchange, Queue

from tests.helpers import make_app, read_record, wait_for, worker_process

#: Claims an idle drain consumer may make in a second: one per ``get`` call here (the
#: loop below calls it once or twice a second), none from the waits themselves.
IDLE_CLAIMS = 5


def _counting(store, names: tuple[str, ...]) -> dict[str, int]:
    """Count the calls of ``store``'s methods ``names`` (this connection's store)."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        method = getattr(store, name)

        def counted(*args, _method=method, _name=name, **kwargs):
            counts[_name] += 1
            return _method(*args, **kwargs)

        setattr(store, name, counted)
    return counts


def _consume_for(queue, seconds: float) -> list:
    """``queue.get`` in a loop (as a SimpleQueue user would) for ``seconds``."""
    got = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            message = queue.get(timeout=max(end - time.monotonic(), 0.01))
        except queue.Empty:
            continue
        message.ack()
        got.append(message.payload)
    return got


def test_an_idle_drain_consumer_stops_claiming_once_its_countdown_passed(target):
    _idle_after_countdown(target, "q")


def test_an_idle_drain_consumer_stops_claiming_once_another_queues_countdown_passed(
    pg_target,
):
    """PostgreSQL announces every queue's delayed jobs to every listener of the schema."""
    _idle_after_countdown(pg_target, "other")


def _idle_after_countdown(target, name: str) -> None:
    """A consumer of "q" drains while a countdown on ``name`` passes, then 1 s idle."""
    conn = Connection(target.broker_url, transport_options=target.transport_options)
    publisher = Connection(target.broker_url, transport_options=target.transport_options)
    try:
        conn.connect()
        queue = conn.SimpleQueue("q")
        assert _consume_for(queue, 0.2) == []  # listening before the countdown is sent
        producer = publisher.Producer()
        eta = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
        producer.publish(
            {"n": 1},
            routing_key=name,
            declare=[Queue(name, Exchange(""), routing_key=name)],
            headers={"eta": eta},
        )
        got = _consume_for(queue, 2.0)  # the countdown passes meanwhile
        assert got == ([{"n": 1}] if name == "q" else [])
        counts = _counting(conn.transport.store, ("claim", "next_due", "has_due"))
        assert _consume_for(queue, 1.0) == []
        # Before: 3,377-8,733 (PostgreSQL), 43,664-56,202 (SQLite); another queue's: 6,046.
        assert counts["claim"] <= IDLE_CLAIMS, counts
        assert counts["next_due"] + counts["has_due"] <= 2, counts
    finally:
        conn.close()
        publisher.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_an_idle_green_worker_stays_idle_after_a_countdown(pg_target, tmp_path, pool):
    """A gevent/eventlet ``celery worker`` (its consumer drains: no event loop) after a
    countdown task ran: its CPU over 3 idle seconds (before: 0.76 s, the loop spinning on
    claims; a worker that never saw a countdown: 0.03 s)."""
    pg_target.open().close()
    opts = dict(pg_target.transport_options, polling_interval=10.0)
    app = make_app(pg_target, transport_options=opts)
    record = tmp_path / "record.tsv"
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts)}
    args = ("-P", pool, "-c", "2")
    with worker_process(pg_target, record, *args, log=tmp_path / "worker.log", **env) as worker:
        app.send_task("tests.apps.proj.mark", ("hello",))
        wait_for(lambda: read_record(record), 60, interval=0.1)
        app.send_task("tests.apps.proj.mark", ("later",), countdown=1)
        wait_for(lambda: len(read_record(record)) == 2, 20, interval=0.1)
        time.sleep(1.0)  # let the worker settle after the task
        before = _cpu_seconds(worker.pid)
        time.sleep(3.0)
        spent = _cpu_seconds(worker.pid) - before
        assert spent < 0.25, f"idle {pool} worker used {spent:.2f} s of CPU in 3 s"
