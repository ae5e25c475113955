"""The maintenance lease holder rotates jobs' generations from a thread of its own
(maintenance/rotator.py), where the engine keeps them; nobody else does.

What a rotation keeps and frees is tested in tests/store/test_generations.py; here: who
rotates, in a real kombu worker loop.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from kombu import Connection

from kombu_alkstore.maintenance import LEASE
from kombu_alkstore.store import NewJob
from tests.helpers import bloat_offers, consumer_in_hub, run_until, table_pages, wait_for


@pytest.mark.parametrize("engine", ["postgresql"])
def test_the_lease_holders_loop_rotates_and_another_worker_does_not(target):
    """The first worker's loop takes the lease at once; a job published before its
    rotations is copied into another generation within a cycle of them (about eight
    seconds), and is still claimable; the second worker, which never took the lease,
    starts no rotation thread."""
    with (
        consumer_in_hub(target) as (conn, _, got, hub),
        consumer_in_hub(target) as (other, _, _, other_hub),
        psycopg.connect(target.url, autocommit=True) as admin,
    ):
        transport = conn.transport
        store = transport.store
        jobs = store.names["jobs"]
        # The loop asks for the lease as soon as it turns, not a sweep_interval (here a
        # minute) later: the round, then the rotations, follow.
        run_until(hub, lambda: transport.maintenance.holds)
        run_until(hub, lambda: transport.claims.in_flight() == 0)
        assert store.lease_holder(LEASE) == transport.maintenance.owner
        wait_for(lambda: transport.rotator.running, 10)
        other.transport._loop_sweep()
        run_until(other_hub, lambda: other.transport.claims.in_flight() == 0)
        assert not other.transport.rotator.running  # it does not hold the lease

        # More than a page (ROTATION_SMALL), in one generation (one statement's time);
        # delayed, so they stay live.
        later = store.now() + 3600
        jid, *_ = store.enqueue_many([NewJob("held", b"x" * 200, run_at=later)] * 60)
        (gen,) = admin.execute(f"SELECT gen FROM {jobs} WHERE id = %s", (jid,)).fetchone()

        def moved() -> bool:
            row = admin.execute(f"SELECT gen FROM {jobs} WHERE id = %s", (jid,)).fetchone()
            return row is not None and row[0] != gen

        wait_for(moved, 30)
        assert store.get_job(jid) is not None
    assert not transport.rotator.running  # stopped with its connection


@pytest.mark.parametrize("engine", ["postgresql"])
def test_a_publish_nudges_the_idle_holders_rotations(target):
    """On an idle store the holder's rotations wait longer each time (1, 2, 4, 8 s...);
    a publish to its queue wakes its loop, which brings the next rotation at once, and
    once a generation holds more than a page they are a second apart again."""
    with consumer_in_hub(target) as (conn, _, got, hub):
        transport = conn.transport
        store = transport.store
        rotated: list[tuple[float, str]] = []
        rotate = store.rotate_generation

        def counted():
            done = rotate()
            rotated.append((time.monotonic(), done.outcome))
            return done

        store.rotate_generation = counted
        run_until(hub, lambda: transport.maintenance.holds)
        wait_for(lambda: len(rotated) >= 3, 15)  # idle: about 1, 3 and 7 s in
        assert [o for _, o in rotated] == ["idle"] * 3, rotated
        time.sleep(0.5)  # the next one is 8 s away
        published = time.monotonic()
        with Connection(target.broker_url, transport_options=target.transport_options) as p:
            queue = p.SimpleQueue("q")
            for n in range(60):  # more than a page (ROTATION_SMALL): worth rotating
                queue.put({"n": n, "pad": "x" * 200})
        run_until(hub, lambda: len(got) == 60 and "empty" in [o for _, o in rotated[3:]], 4)
        assert rotated[3][0] - published < 1.0, rotated  # at once, not 8 s later


@pytest.mark.parametrize("engine", ["sqlite"])
def test_an_engine_without_generations_starts_no_rotation(target):
    """SQLite keeps no old row versions: its lease holder's round starts no thread."""
    with consumer_in_hub(target) as (conn, _, _, _):
        transport = conn.transport
        store = transport.store
        assert not store.capabilities.generations
        transport.sweep()  # no claims session: the lease and the round, here
        assert store.lease_holder(LEASE) == transport.maintenance.owner
        assert transport.maintenance.holds
        assert not transport.rotator.running


@pytest.mark.parametrize("engine", ["postgresql"])
def test_the_holder_reopens_the_handoff_a_pin_closed(target):
    """Offers past the hand-off's gate (dead versions a pin kept; the pin since gone):
    the lease holder's rotation thread VACUUMs the table within a few of its checks
    (HANDOFF_CHECK), and nobody else does here (this machine's PostgreSQL runs with
    autovacuum off). The consumer's next offer stands, and a publish is handed off."""
    with (
        consumer_in_hub(target) as (conn, _, got, hub),
        psycopg.connect(target.url, autocommit=True) as admin,
        psycopg.connect(target.url) as pin,
    ):
        transport = conn.transport
        store = transport.store
        offers = store.names["offers"]

        def pages() -> int:
            return table_pages(admin, offers)

        run_until(hub, lambda: transport.maintenance.holds)
        wait_for(lambda: transport.rotator.running, 10)
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        bloat_offers(admin, offers)
        pin.rollback()

        started = time.monotonic()
        # Within a few checks; 120 s: another test's leftover session may pin it a while.
        run_until(hub, lambda: pages() <= 8, 120)  # the gate's size: open
        took = time.monotonic() - started
        print(f"\nthe holder reopened the hand-off {took:.1f} s after the pin")
        with Connection(target.broker_url, transport_options=target.transport_options) as p:
            queue = p.SimpleQueue("q")
            queue.put({"n": 1})  # announced and claimed; acked, the slot is offered again
            run_until(hub, lambda: len(got) == 1)
            got[0].ack()
            run_until(hub, lambda: admin.execute(f"SELECT 1 FROM {offers}").fetchone())
            queue.put({"n": 2})
        jobs = store.names["jobs"]
        (state,) = admin.execute(f"SELECT state FROM {jobs} ORDER BY id DESC").fetchone()
        assert state == "processing"  # the second: claimed for the offer inside its INSERT
        run_until(hub, lambda: len(got) == 2)
