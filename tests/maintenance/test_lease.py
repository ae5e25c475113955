"""Maintenance runs under a lease: one worker's round at a time, handed on when it stops.

The jobs themselves (what each one moves or deletes) are tested in the store's
conformance suite; here: who runs them, with real stores, processes and a worker loop.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest

from kombu_alkstore.maintenance import LEASE, Maintenance
from kombu_alkstore.store import MAINTENANCE_JOBS, open_store
from tests.helpers import consumer_in_hub, run_until, wait_for


def _expired(store) -> None:
    store.enqueue("q", b"late", expires_at=time.time() - 1)


def test_one_holder_runs_the_round_the_others_skip(store):
    first, second = Maintenance(60.0), Maintenance(60.0)
    _expired(store)
    done = first.run(store)
    assert [r.job for r in done] == list(MAINTENANCE_JOBS)
    assert {r.job: r.count for r in done}["expire"] == 1
    assert store.dead_list()[0].last_error == "expired"
    assert second.run(store) is None  # another worker holds the lease
    assert store.lease_holder(LEASE) == first.owner
    first.release(store)  # a clean close hands it on at once
    assert second.run(store) is not None
    assert store.lease_holder(LEASE) == second.owner


def test_the_lease_passes_on_when_its_holder_stops_renewing(store):
    first, second = Maintenance(0.2), Maintenance(0.2)  # the lease lasts 0.5 s
    assert first.run(store) is not None
    assert second.run(store) is None
    time.sleep(0.6)  # first died: no renewal
    assert second.run(store) is not None
    assert first.run(store) is None


def _worker(url: str, schema: str, ready, go, out) -> None:
    store = open_store(url, schema=schema)
    m = Maintenance(0.1)  # lease 0.25 s, renewed every round
    ready.put(m.owner)
    go.wait(60)
    until, rounds = time.time() + 2.0, 0
    while time.time() < until:
        if m.run(store) is not None:
            rounds += 1
        time.sleep(0.02)
    out.put((m.owner, rounds))
    store.close()


def test_processes_racing_for_the_lease_take_turns_never_together(target):
    """Four processes call a round every 20 ms for 2 s: the holder renews, so one of them
    runs every round and the others none (no round of two holders at once)."""
    target.open().close()  # tables made once, before the race
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(target.url, target.schema, ready, go, out))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=60)
        go.set()  # all four race from here
        results = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    ran = [rounds for _, rounds in results if rounds]
    assert len(ran) == 1, results  # one holder throughout
    assert ran[0] > 20


@pytest.mark.parametrize("engine", ["postgresql"])
def test_a_worker_loop_runs_the_round_off_its_claims_session(target):
    """In the event loop (PostgreSQL: the claims session), the round runs on a pooled
    connection (from the housekeeping thread), never on the claims session, where a
    slow round would hold back the heartbeats pipelined behind it (issue 29, defect 3);
    the expired job is dead-lettered and the lease is the worker's."""
    with consumer_in_hub(target) as (conn, _, _, hub):
        transport = conn.transport
        store = transport.store
        claims = transport.claims
        assert claims is not None
        _expired(store)
        transport._loop_sweep()  # the loop's timer: the refresh and the lease, sent
        assert claims.in_flight() == 2
        run_until(hub, lambda: claims.in_flight() == 0)
        assert store.lease_holder(LEASE) == transport.maintenance.owner
        # The round itself: from the housekeeping thread, woken by the lease's answer.
        wait_for(lambda: store.dead_list(), 10)
        assert store.dead_list()[0].last_error == "expired"
        assert claims.in_flight() == 0 and transport.housekeeper.running
    other = target.open()
    try:
        assert other.lease_holder(LEASE) is None  # released at close
    finally:
        other.close()


def test_a_holders_round_runs_every_job(store):
    """A holder's round: the lease, then every job in one call."""
    _expired(store)
    m = Maintenance(60.0)
    done = m.run(store)
    assert m.held
    assert [r.job for r in done] == list(MAINTENANCE_JOBS)
    assert store.dead_list()[0].last_error == "expired"


def test_a_connection_that_never_held_the_lease_releases_nothing(store, monkeypatch):
    """A producer's connection closes without a lease statement (one round trip less per
    short-lived connection); a holder's close releases it."""
    released: list[tuple] = []
    monkeypatch.setattr(store, "lease_release", lambda *args: released.append(args))
    m = Maintenance(60.0)
    m.release(store)
    assert released == []
    m.run(store)
    m.release(store)
    assert released == [(LEASE, m.owner)]
