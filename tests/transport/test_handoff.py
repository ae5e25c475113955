"""Hand-off on PostgreSQL: an idle channel offers its free prefetch slots, and a publisher
claims a new due job for it and sends it in the notification.

In a kombu event loop (the hub a Celery worker runs): the offer is made once a claim finds
no backlog and withdrawn on a backlog or a cancel; a handed-off job is delivered and acked;
a job that arrives after its consumer left is handed back with its attempt refunded; jobs
that cannot travel in a notification (too big, delayed, inside the caller's transaction)
take the claim path; an offer whose LISTEN backend died is never used, and the sweep
removes it. With Celery worker processes: idle workers take paced tasks exactly once, and
a worker killed with -9 while idle gets none of the tasks published after its death.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from kombu import Connection
from kombu import Queue as KQueue
from kombu.asynchronous import Hub

import kombu_alkstore
from tests.helpers import (
    bloat_offers,
    consumer_in_hub,
    kill_group,
    lease_held_elsewhere,
    make_app,
    read_record,
    run_until,
    vacuumed_away,
    wait_for,
    worker_process,
)


@pytest.fixture
def idle_consumer(pg_target):
    """A consumer of "q" in a hub whose first claim found nothing: it has offered.
    Another worker holds the maintenance lease, so no round of this consumer's (its first
    comes as its loop starts) sweeps an offer while a test looks at it."""
    lease_held_elsewhere(pg_target)
    with consumer_in_hub(pg_target, prefetch_count=2) as (conn, consumer, got, hub):
        run_until(hub, lambda: offers(pg_target) == [("q", 2)])
        yield conn, consumer, got, hub


def offers(pg_target) -> list[tuple[str, int]]:
    """The standing offers: (queue, free slots); a row with no slot left offers nothing."""
    with psycopg.connect(pg_target.url, autocommit=True) as c:
        sql = f'SELECT unnest(queues), slots FROM "{pg_target.schema}".offers WHERE slots > 0'
        return sorted(c.execute(sql).fetchall())


def states(pg_target) -> list[tuple[str, int]]:
    with psycopg.connect(pg_target.url, autocommit=True) as c:
        sql = f'SELECT state, attempts FROM "{pg_target.schema}".jobs ORDER BY id'
        return c.execute(sql).fetchall()


def publish(pg_target, body, **kwargs) -> None:
    with Connection(pg_target.broker_url, transport_options=pg_target.transport_options) as c:
        c.Producer().publish(body, routing_key="q", **kwargs)


def test_an_idle_consumer_gets_a_new_job_already_claimed(idle_consumer, pg_target):
    conn, _, got, hub = idle_consumer
    publish(pg_target, {"i": 1})
    # Claimed by the publisher's own statement: no claim of the consumer's involved.
    assert states(pg_target) == [("processing", 1)]
    assert offers(pg_target) == [("q", 1)]
    run_until(hub, lambda: len(got) == 1)
    assert got[0].payload == {"i": 1}
    got[0].ack()
    run_until(hub, lambda: states(pg_target) == [] and offers(pg_target) == [("q", 2)])


def test_no_free_slot_no_offer_and_a_backlog_takes_the_claim_path(idle_consumer, pg_target):
    conn, _, got, hub = idle_consumer
    for i in range(5):
        publish(pg_target, {"i": i})
    assert [s for s, _ in states(pg_target)] == ["processing"] * 2 + ["pending"] * 3
    run_until(hub, lambda: len(got) == 2)
    assert offers(pg_target) == []  # both slots taken: withdrawn
    for message in got:
        message.ack()
    run_until(hub, lambda: len(got) == 4)  # claimed: a full batch, still no offer
    assert offers(pg_target) == []
    for message in got[2:]:
        message.ack()
    run_until(hub, lambda: len(got) == 5)
    got[4].ack()
    # The last claim was short: the consumer is idle again and offers both slots.
    run_until(hub, lambda: offers(pg_target) == [("q", 2)])
    assert sorted(m.payload["i"] for m in got) == list(range(5))


def test_cancel_withdraws_the_offer_and_a_late_handoff_is_handed_back(idle_consumer, pg_target):
    conn, consumer, got, hub = idle_consumer
    publish(pg_target, {"i": 1})  # handed off; its notification not read yet
    consumer.cancel()
    run_until(hub, lambda: offers(pg_target) == [])
    run_until(hub, lambda: states(pg_target) == [("pending", 0)])  # attempt refunded
    assert got == []
    publish(pg_target, {"i": 2})
    assert states(pg_target) == [("pending", 0), ("pending", 0)]


@pytest.mark.parametrize(
    "case",
    ["too big for a notification", "delayed", "published in the caller's transaction"],
)
def test_jobs_that_cannot_be_handed_off_are_claimed(idle_consumer, pg_target, case):
    conn, _, got, hub = idle_consumer
    if case == "too big for a notification":
        publish(pg_target, {"blob": "x" * 6000})
    elif case == "delayed":
        eta = datetime.now(timezone.utc) + timedelta(seconds=300)
        publish(pg_target, {"i": 1}, headers={"eta": eta.isoformat()})  # as Celery's ETA
    else:
        with psycopg.connect(pg_target.url) as business:
            with (
                kombu_alkstore.transaction(business),
                Connection(
                    pg_target.broker_url, transport_options=pg_target.transport_options
                ) as c,
            ):
                c.Producer().publish({"i": 1}, routing_key="q")
            business.commit()
    assert states(pg_target) == [("pending", 0)]
    assert offers(pg_target) == [("q", 2)]
    if case != "delayed":
        run_until(hub, lambda: len(got) == 1)  # through its NOTIFY and a claim


def test_an_offer_of_a_dead_waiter_is_not_used_and_is_swept(idle_consumer, pg_target):
    conn, _, got, hub = idle_consumer
    pid = conn.transport.waiter.address
    with psycopg.connect(pg_target.url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(
            lambda: (
                not admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            ),
            10,
        )
    assert offers(pg_target) == [("q", 2)]  # left behind
    publish(pg_target, {"i": 1})
    assert states(pg_target) == [("pending", 0)]  # not handed to the dead waiter
    with pg_target.open() as store:
        store.sweep()
    assert offers(pg_target) == []


# ------------------------------------------------------------- worker processes
def _app_env(target, **options):
    target.open().close()  # the tables, before the workers offer
    opts = dict(target.transport_options, polling_interval=1.0, **options)
    return make_app(target, transport_options=opts), {"ALKSTORE_TEST_OPTIONS": json.dumps(opts)}


def _offering_pids(target) -> set[int]:
    with psycopg.connect(target.url, autocommit=True) as c:
        sql = f'SELECT DISTINCT pid FROM "{target.schema}".offers WHERE slots > 0'
        return {r[0] for r in c.execute(sql)}


def test_idle_workers_take_paced_tasks_exactly_once(pg_target, tmp_path):
    app, env = _app_env(pg_target)
    record = tmp_path / "record.tsv"
    args = ("-c", "2", "-P", "prefork")
    with (
        worker_process(pg_target, record, *args, "-n", "w0@%h", **env),
        worker_process(pg_target, record, *args, "-n", "w1@%h", **env),
    ):
        wait_for(lambda: len(_offering_pids(pg_target)) == 2, 60, interval=0.2)
        with app.producer_or_acquire() as producer:
            for i in range(300):
                app.send_task("tests.apps.proj.mark", (f"t{i}",), producer=producer)
                if i % 10 == 0:
                    time.sleep(0.01)  # bursts and pauses: hand-offs and claims both
        wait_for(lambda: len(read_record(record)) >= 300, 120, interval=0.2)
        time.sleep(1.5)  # anything executed twice would show up now
    rows = read_record(record)
    counts = collections.Counter(row[0] for row in rows)
    assert sorted(counts) == sorted(f"t{i}" for i in range(300))
    assert [k for k, c in counts.items() if c > 1] == []
    assert len({row[3] for row in rows}) == 2, "a burst is spread over the idle workers"


def test_a_worker_killed_while_idle_gets_no_new_task(pg_target, tmp_path):
    # A long visibility timeout: a task handed to the dead worker would wait a minute.
    app, env = _app_env(pg_target, visibility_timeout=60)
    record = tmp_path / "record.tsv"
    args = ("-c", "1", "-P", "prefork")
    with worker_process(pg_target, record, *args, "-n", "doomed@%h", **env) as doomed:
        dead = wait_for(lambda: _offering_pids(pg_target), 60, interval=0.2)
        kill_group(doomed, signal.SIGKILL)
    assert _offering_pids(pg_target) == dead  # its offers outlive it
    with worker_process(pg_target, record, *args, "-n", "alive@%h", **env):
        wait_for(lambda: _offering_pids(pg_target) - dead, 60, interval=0.2)
        for i in range(20):
            app.send_task("tests.apps.proj.mark", (f"t{i}",))
        wait_for(lambda: len(read_record(record)) >= 20, 20, interval=0.2)
    assert {row[0] for row in read_record(record)} == {f"t{i}" for i in range(20)}


# ------------------------------------------------------------- hand-off accounting
def test_a_claim_in_flight_withdraws_the_offer_first(idle_consumer, pg_target):
    """A hand-off racing a claim in flight must not exceed the prefetch (2 here)."""
    conn, consumer, got, hub = idle_consumer
    with (
        psycopg.connect(pg_target.url) as business,
        kombu_alkstore.transaction(business),
        Connection(pg_target.broker_url, transport_options=pg_target.transport_options) as c,
    ):
        for i in range(2):  # pending (a caller's transaction never hands off)
            c.Producer().publish({"i": i}, routing_key="q")
    conn.transport.scheduler.request_claim(
        consumer.channel, conn.transport.claims
    )  # sized to both free slots
    publish(pg_target, {"i": 2})  # the offer must be gone by now
    time.sleep(0.2)
    conn.transport.on_readable()  # the LISTEN socket read before the claim's answer
    run_until(hub, lambda: len(got) >= 2)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        hub.run_once()
    assert sorted(m.payload["i"] for m in got) == [0, 1]
    assert sorted(states(pg_target)) == [("pending", 0), ("processing", 1), ("processing", 1)]


def test_an_offer_shares_its_slots_across_its_queues(pg_target):
    """A consumer of two queues with prefetch 1 is handed one job, not one per queue."""
    with Connection(pg_target.broker_url, transport_options=pg_target.transport_options) as conn:
        conn.connect()
        hub = Hub()
        got: list = []
        queues = [KQueue(name, routing_key=name) for name in ("a", "b")]
        consumer = conn.Consumer(queues, callbacks=[lambda body, message: got.append(message)])
        consumer.qos(prefetch_count=1)
        consumer.consume()
        conn.transport.register_with_event_loop(conn.connection, hub)
        try:
            run_until(hub, lambda: offers(pg_target) == [("a", 1), ("b", 1)])
            with Connection(
                pg_target.broker_url, transport_options=pg_target.transport_options
            ) as c:
                c.Producer().publish({"q": "a"}, routing_key="a")
                c.Producer().publish({"q": "b"}, routing_key="b")
            assert sorted(s for s, _ in states(pg_target)) == ["pending", "processing"]
            run_until(hub, lambda: len(got) == 1)
        finally:
            conn.close()
            hub.close()


def test_the_size_limit_counts_the_notification_text_not_raw_bytes(idle_consumer, pg_target):
    """Escaped characters grow in JSON: a job whose notification would pass NOTIFY's
    8000-byte limit takes the claim path instead of failing the publish."""
    with pg_target.open() as store:
        store.enqueue("q", b"x" * 3000, msg_id="\x01" * 900)  # 3.9 kB raw, 9.6 kB as JSON
    assert states(pg_target) == [("pending", 0)]
    assert offers(pg_target) == [("q", 2)]


def offers_reads(pg_target) -> int:
    """Scans of the offers table so far (sequential and index), as flushed to the
    statistics: a backend flushes its own at exit, or when told to
    (``pg_stat_force_next_flush``), else up to 10 s late. A register reads the table (its
    withdrawal's lookup); a publish behind a closed gate does not."""
    sql = (
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
        "WHERE relid = %s::regclass"
    )
    with psycopg.connect(pg_target.url, autocommit=True) as c:
        return c.execute(sql, (f'"{pg_target.schema}".offers',)).fetchone()[0]


def one_job_claimed(pg_target, hub, got: list) -> None:
    """A job published behind a closed gate is announced, not handed off; it is
    claimed, delivered and acked."""
    n = len(got)
    publish(pg_target, {"n": n})
    assert states(pg_target)[-1] == ("pending", 0)
    run_until(hub, lambda: len(got) == n + 1)
    got[-1].ack()
    run_until(hub, lambda: states(pg_target) == [])


def test_a_closed_gate_stops_the_offers_until_the_consumer_asks_again(pg_target, monkeypatch):
    """Behind a pinned horizon the offers table grows past the hand-off's gate and the
    store withdraws every offer instead. A consumer told so offers nothing for
    GATE_RECHECK seconds: before, each job cost a withdrawal and offers the store only
    withdrew (1,300 statements a second at 500 tasks/s). Its jobs are announced and
    claimed meanwhile; once the gate is open again its next offer stands, and a publish
    is handed off."""
    recheck = 3.0
    monkeypatch.setattr("kombu_alkstore.transport.handoff.GATE_RECHECK", recheck)
    lease_held_elsewhere(pg_target)  # no round of the consumers' VACUUMs the table
    offers_table = f'"{pg_target.schema}".offers'
    with (
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as pin,
    ):
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        bloat_offers(admin, offers_table)
        admin.execute("SELECT pg_stat_force_next_flush()")  # the bloat's scans counted now
        before = offers_reads(pg_target)
        with consumer_in_hub(pg_target, prefetch_count=2) as (_, _, got, hub):
            started = time.monotonic()
            for _ in range(20):
                one_job_claimed(pg_target, hub, got)
            took = time.monotonic() - started
        time.sleep(1.0)  # its backends flush their counts as they exit
        reads = offers_reads(pg_target) - before
        print(f"\n20 jobs behind a closed gate in {took:.1f} s: offers read {reads}×")
        # Its first offer (told the gate is closed) and its withdrawal at close, then per
        # recheck an offer (and a claim's withdrawal of it, if one came before the answer).
        assert reads <= 2 + 2 * (1 + took / recheck), (reads, took)

        with consumer_in_hub(pg_target, prefetch_count=2) as (_, _, got, hub):
            one_job_claimed(pg_target, hub, got)  # its first offer was answered: closed
            pin.rollback()
            vacuumed_away(admin, offers_table)  # the emptied table truncated: the gate opens
            run_until(hub, lambda: offers(pg_target) == [("q", 2)], 10)  # asked again
            publish(pg_target, {"n": "handed"})
            assert states(pg_target) == [("processing", 1)]  # claimed inside the INSERT
            run_until(hub, lambda: len(got) == 2)
            assert got[-1].payload == {"n": "handed"}
