"""The maintenance lease holder rotates jobs' generations from a thread of its own
(maintenance/rotator.py), where the engine keeps them; nobody else does.

What a rotation keeps and frees is tested in tests/store/test_generations.py; here: who
rotates, in a real kombu worker loop.
"""

from __future__ import annotations

import psycopg
import pytest

from kombu_alkstore.maintenance import LEASE
from tests.helpers import consumer_in_hub, run_until, wait_for


@pytest.mark.parametrize("engine", ["postgresql"])
def test_the_lease_holders_loop_rotates_and_another_worker_does_not(target):
    """A job published before the holder's rotations is copied into another generation
    within a cycle of them (about eight seconds), and is still claimable; the second
    worker, which never took the lease, starts no rotation thread."""
    with (
        consumer_in_hub(target) as (conn, _, got, hub),
        consumer_in_hub(target) as (other, _, _, other_hub),
        psycopg.connect(target.url, autocommit=True) as admin,
    ):
        transport = conn.transport
        store = transport.store
        jobs = store.names["jobs"]
        transport._loop_sweep()  # the loop's timer: the lease, then the round
        run_until(hub, lambda: transport.claims.in_flight() == 0)
        assert store.lease_holder(LEASE) == transport.maintenance.owner
        wait_for(lambda: transport.rotator.running, 10)
        other.transport._loop_sweep()
        run_until(other_hub, lambda: other.transport.claims.in_flight() == 0)
        assert not other.transport.rotator.running  # it does not hold the lease

        jid = store.enqueue("held", b"x", run_at=store.now() + 3600)  # stays live
        (gen,) = admin.execute(f"SELECT gen FROM {jobs} WHERE id = %s", (jid,)).fetchone()

        def moved() -> bool:
            row = admin.execute(f"SELECT gen FROM {jobs} WHERE id = %s", (jid,)).fetchone()
            return row is not None and row[0] != gen

        wait_for(moved, 30)
        assert store.get_job(jid) is not None
    assert not transport.rotator.running  # stopped with its connection


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
