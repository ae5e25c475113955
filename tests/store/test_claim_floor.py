"""Claim floors (issue 35, ``store/postgres/floors.py``): behind a pinned xmin horizon a
claim's candidate scan does not grow with the dead rows left at the head of the claim
order, and what lands behind a floor is still claimed, in claim order.

A real PostgreSQL (this machine's runs with ``autovacuum = off``); each test in its own
schema. The cost is counted, not timed: the shared buffers of the claim's candidate
scans (``EXPLAIN (ANALYZE, BUFFERS)`` of the store's own claim statement, with the
parameters it binds now, in a transaction rolled back), as benchmarks/claim_cost.py
measures them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

import psycopg
import pytest

from kombu_alkstore.store import NewJob
from kombu_alkstore.store.ambient import bound_connection
from kombu_alkstore.store.postgres.floors import ClaimFloors
from kombu_alkstore.store.postgres.lookbehind import look_behind
from kombu_alkstore.store.postgres.statements import claim_key
from tests.helpers import (
    explained_plan,
    index_parts,
    parts_sum,
    plan_nodes,
    scans,
    scans_buffers,
    vacuum_analyze,
)

BODY = b'{"body": "floor"}'


def scan_buffers(conn: psycopg.Connection, store, queue: str) -> int:
    """Shared buffers (hit + read) of the scans of ``jobs`` that find a claim's
    candidates (the CTE "due" of ``claim_one``), as the store would claim now."""
    sql = store._sql[claim_key([queue])]
    params = store._params(store.claim_params([queue], 1))
    plan = explained_plan(conn, sql, params)
    (due,) = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE due"]
    found = [n for n in plan_nodes(due) if scans(n, "jobs")]
    claim_index = index_parts(conn, f'"{store.options.schema}".jobs_claim')
    assert found and all(n.get("Index Name") in claim_index for n in found), found
    return scans_buffers(due, "jobs")


def cycles(store, queue: str, n: int, **job) -> None:
    """n publish + claim + ack cycles, one job each (``job``: its NewJob fields): each
    claim takes the oldest job."""
    for _ in range(n):
        store.publish([NewJob(queue, BODY, **job)])
        (got,) = store.claim([queue], 1)
        assert store.ack([got]) == {got.id}


def test_claim_cost_does_not_grow_with_dead_rows_behind_a_pinned_horizon(pg_target):
    """With floors (the default) the candidate scan after 3,000 cycles (~6,000 dead rows
    the horizon keeps) reads about what it read at none; without them (rescan 0) the
    same measure grows, so the test can fail."""
    url = pg_target.url
    with (
        pg_target.open() as floored,
        pg_target.open(claim_floor_rescan=0) as plain,
        psycopg.connect(url, autocommit=True) as admin,
        psycopg.connect(url) as explain,
        psycopg.connect(url) as pin,
    ):
        runs = {"on": floored, "off": plain}
        for queue, store in runs.items():
            store.enqueue_many([NewJob(queue, BODY) for _ in range(5)])
        # A table the size of a working queue's (a tiny one is scanned whole, in any order).
        floored.enqueue_many([NewJob("other", BODY) for _ in range(5000)])
        vacuum_analyze(admin, f'"{pg_target.schema}".jobs')
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        measured = {}
        for queue, store in runs.items():
            cycles(store, queue, 1)  # a floor now (with floors): the first claim's
            base = scan_buffers(explain, store, queue)
            cycles(store, queue, 3000)
            measured[queue] = (base, scan_buffers(explain, store, queue))
        admin.execute(f'VACUUM "{pg_target.schema}".jobs')  # removes nothing: pinned
        dead = parts_sum(admin, f'"{pg_target.schema}".jobs', "n_dead_tup")
        assert dead >= 10_000, dead  # the horizon was pinned: 2 dead versions a cycle
        (on_base, on_after), (off_base, off_after) = measured["on"], measured["off"]
        print("claim scan buffers (at 1 cycle, after 3,001):", measured)
        assert on_after <= on_base + 10, measured
        assert off_after >= off_base + 40, measured  # the head walk this test guards


def probe_buffers(conn: psycopg.Connection, store, key: str, queue: str) -> int:
    """Shared buffers (hit + read) ``has_due`` or ``next_due`` reads from ``jobs`` and its
    indexes, bound as the store binds it now."""
    params = store._params(store.probe_params([queue]))
    return scans_buffers(explained_plan(conn, store._sql[key], params), "jobs")


def test_due_checks_do_not_grow_with_dead_rows_behind_a_pinned_horizon(pg_target):
    """has_due (the safety-net poll) and next_due (a worker's due times) look in the
    bands a claim would walk. Behind a pin, with floors, has_due reads what it read at
    the start, and next_due steps only over the claims whose deadlines lie after the
    floor (a claimed version's run_at is its deadline; 1 s timeouts here, all past at
    each measure's last claim): from 1,500 to 3,000 cycles neither grows. With floors
    off (rescan 0) both walk every dead entry from the head (the 500/s pressure run:
    84,000 and 1.26 M buffers)."""
    url = pg_target.url
    keys = ("has_due", "next_due")
    with (
        pg_target.open(claim_floor_rescan=3600) as floored,  # one full claim, the first
        pg_target.open(claim_floor_rescan=0) as plain,
        psycopg.connect(url, autocommit=True) as admin,
        psycopg.connect(url) as explain,
        psycopg.connect(url) as pin,
    ):
        runs = {"on": floored, "off": plain}
        for queue, store in runs.items():
            # a delayed job: next_due has an answer, after every job the cycles claim
            store.enqueue_many([NewJob(queue, BODY, run_at=store.now() + 3600)])
        floored.enqueue_many([NewJob("other", BODY) for _ in range(5000)])
        vacuum_analyze(admin, f'"{pg_target.schema}".jobs')
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        measured = {}
        for queue, store in runs.items():
            read = []
            for _ in range(2):
                cycles(store, queue, 1500, visibility_timeout=1)
                time.sleep(1.1)  # every deadline passed; the next claim's floor is now
                cycles(store, queue, 1, visibility_timeout=1)
                read.append({k: probe_buffers(explain, store, k, queue) for k in keys})
            measured[queue] = read
            assert store.has_due([queue]) is False
            assert store.next_due([queue]) > store.now() + 3000
        print("has_due / next_due buffers (after 1,500 cycles, after 3,000):", measured)
        for key in keys:
            (on_half, on_all), (off_half, off_all) = measured["on"], measured["off"]
            # (+12: a descent of each generation's index, which may have had no entry
            # at the first measure, the cycles' rows being in the generations of their
            # seconds, migration 0017)
            assert on_all[key] <= on_half[key] + 10 + 12, (key, measured)
            assert off_all[key] >= off_half[key] + 300, (key, measured)  # can fail


@pytest.fixture
def floored(pg_target):
    """A store whose claims use floors, one queue "q" declared."""
    with pg_target.open() as store:
        store.queue_declare("q")
        yield store


def _move_floor(store, queue: str = "q", n: int = 3) -> None:
    """n jobs published and claimed: the queue's floor is past them."""
    store.enqueue_many([NewJob(queue, BODY) for _ in range(n)])
    got = store.claim([queue], n)
    assert len(got) == n
    store.ack(got)
    assert store.floors.snapshot()[queue]


def _late_publish(store, pg_target, queue: str = "q") -> tuple[psycopg.Connection, float]:
    """A job published inside a caller's transaction left open (its run_at is its
    insert's time); returns the open connection and that time."""
    conn = psycopg.connect(pg_target.url)
    with bound_connection(conn):
        store.publish([NewJob(queue, b"late")])
    (run_at,) = conn.execute(
        f'SELECT run_at FROM "{pg_target.schema}".jobs WHERE body = %s', (b"late",)
    ).fetchone()
    return conn, run_at


def _hear_until_below(store, waiter, queue: str, run_at: float, timeout: float = 5) -> None:
    """Read the waiter's notifications until ``queue``'s floors are below ``run_at``."""
    deadline = time.monotonic() + timeout
    while max(store.floors.snapshot().get(queue, {}).values(), default=0) > run_at:
        left = deadline - time.monotonic()
        assert left > 0, f"no notification lowered {queue}'s floor below {run_at}"
        waiter.wait(left)


def test_a_late_commit_behind_the_floor_is_claimed_once_its_notification_is_read(
    floored, pg_target
):
    waiter = floored.waiter()
    try:
        conn, run_at = _late_publish(floored, pg_target)
        time.sleep(0.3)  # past the margin
        _move_floor(floored)
        assert min(floored.floors.snapshot()["q"].values()) > run_at
        conn.commit()  # the late job lands behind the floor; its NOTIFY is sent now
        conn.close()
        assert floored.claim(["q"], 1) == []  # the floor hides it until heard ...
        # ... the store's waiter reads [run_at, "q"]: the floor goes below
        _hear_until_below(floored, waiter, "q", run_at)
        (got,) = floored.claim(["q"], 1)
        assert got.body == b"late"
    finally:
        waiter.close()


def test_a_late_commit_unheard_is_claimed_by_the_periodic_full_claim(pg_target):
    with pg_target.open(claim_floor_rescan=1.0) as store:  # no waiter: nothing is heard
        store.queue_declare("q")
        conn, _ = _late_publish(store, pg_target)
        time.sleep(0.3)
        _move_floor(store)
        conn.commit()
        conn.close()
        assert store.claim(["q"], 1) == []
        assert not store.has_due(["q"])  # the safety net looks where the claim would
        time.sleep(1.1)  # the queue's next claim walks from the head, and so does has_due
        assert store.has_due(["q"])
        (got,) = store.claim(["q"], 1)
        assert got.body == b"late"


def test_the_watch_finds_an_unheard_job_behind_the_floor_and_announces_it(pg_target):
    """One look behind the floors (lookbehind.look_behind, what the watch thread runs)
    lowers this process's floors below a job landed behind them unheard, and announces
    it to every waiter; the queue's claims need no walk from the head meanwhile."""
    with (
        pg_target.open(claim_floor_rescan=3600, claim_floor_watch_after=0) as store,
        psycopg.connect(pg_target.url, autocommit=True) as listener,
    ):
        store.queue_declare("q")
        conn, run_at = _late_publish(store, pg_target)
        time.sleep(0.3)
        _move_floor(store)  # the first claim of "q" was its full one; the next is in an hour
        conn.commit()  # its own announcement goes out now, before anyone listens below
        conn.close()
        listener.execute(f'LISTEN "{store.statements.channel}"')
        assert store.claim(["q"], 1) == []
        assert look_behind(store) == [("q", run_at)]
        assert max(store.floors.snapshot()["q"].values()) <= run_at
        heard = [json.loads(n.payload) for n in listener.notifies(timeout=2)]
        assert [run_at, "q"] in heard
        (got,) = store.claim(["q"], 1)
        assert got.body == b"late"
        store.ack([got])
        assert look_behind(store) == []  # nothing behind the floors: nothing announced


def _claim_empty(session, queue: str, times: int) -> None:
    """``times`` claims of a queue with no job: each walks from the head (no floor)."""
    for _ in range(times):
        session.claim([queue], 1, lambda got, more: None)
        session.wait()


def test_a_claim_session_whose_claims_from_the_head_are_quick_starts_no_watch(floored):
    """The default: the watch waits for claims from the head that take 25 ms, which a
    clean table never gives (so a busy worker holds two connections, issue 18)."""
    session = floored.session()
    try:
        _claim_empty(session, "q", 5)
        assert not floored.floor_watch.running and not floored.floors.watched
    finally:
        session.close()


def test_slow_claims_from_the_head_start_the_watch_and_an_idle_worker_stops_it(pg_target):
    """Two claims from the head in a row at least ``claim_floor_watch_after`` each (a
    microsecond here: every claim is) start the watch; once no queue with a floor is
    claimed between two looks, it stops, and a slow claim starts it again."""
    with pg_target.open(claim_floor_rescan=2.0, claim_floor_watch_after=1e-6) as store:
        store.queue_declare("q")
        session = store.session()
        try:
            _claim_empty(session, "q", 1)
            assert not store.floor_watch.running  # one slow claim may be a hiccup
            _claim_empty(session, "q", 1)
            assert store.floor_watch.running and store.floors.watched
            first = store.floor_watch._thread
            first.join(5)  # "q" has no floor: the first look (at 1 s) has nothing to do
            assert not first.is_alive() and not store.floor_watch.running
            assert not store.floors.watched
            _claim_empty(session, "q", 2)
            assert store.floor_watch.running
        finally:
            session.close()


def test_with_the_watch_off_slow_claims_start_none(pg_target):
    with pg_target.open(claim_floor_watch=False, claim_floor_watch_after=0) as store:
        store.queue_declare("q")
        session = store.session()
        try:
            _claim_empty(session, "q", 3)
            assert not store.floor_watch.running
        finally:
            session.close()


def test_a_claim_session_runs_the_watch_until_the_store_closes(pg_target):
    """With ``claim_floor_watch_after`` 0 and a claim session open, the floors' watch
    thread looks behind them every rescan / 2 seconds: an unheard job behind the floor
    lowers them with no claim."""
    store = pg_target.open(claim_floor_rescan=1.0, claim_floor_watch_after=0)
    try:
        store.queue_declare("q")
        conn, run_at = _late_publish(store, pg_target)
        time.sleep(0.3)
        _move_floor(store)
        session = store.session()
        conn.commit()
        conn.close()
        deadline = time.monotonic() + 5
        while max(store.floors.snapshot()["q"].values()) > run_at:
            assert time.monotonic() < deadline, "the watch did not lower the floor"
            time.sleep(0.05)
        thread = store.floor_watch._thread
        assert thread is not None and thread.name == "alkstore-floor-watch"
        session.close()
    finally:
        store.close()
    thread.join(5)
    assert not thread.is_alive()


def test_a_higher_priority_published_after_the_floor_moved_is_claimed_first(floored):
    _move_floor(floored)
    floored.enqueue_many([NewJob("q", b"low-a"), NewJob("q", b"low-b")])
    (got,) = floored.claim(["q"], 1)
    assert got.body == b"low-a"  # priority 0 has a floor now
    floored.ack([got])
    floored.enqueue_many([NewJob("q", b"mid", priority=5), NewJob("q", b"high", priority=9)])
    got = floored.claim(["q"], 2)
    assert [d.body for d in got] == [b"high", b"mid"]
    floored.ack(got)
    # priorities 9, 5 and 0 have floors: a 5 published now still comes before the 0
    floored.enqueue_many([NewJob("q", b"mid-2", priority=5)])
    got = floored.claim(["q"], 2)
    assert [d.body for d in got] == [b"mid-2", b"low-b"]
    assert set(floored.floors.snapshot()["q"]) == {0, 5, 9}


def test_a_job_with_an_eta_in_the_past_is_claimed(floored):
    waiter = floored.waiter()
    try:
        _move_floor(floored)
        past = floored.now() - 3600
        floored.publish([NewJob("q", b"overdue", run_at=past)])
        # Its NOTIFY carries its run_at, an hour before the floor. The waiter may first
        # read only the notifications of _move_floor's jobs: read until the floor is down.
        _hear_until_below(floored, waiter, "q", past)
        (got,) = floored.claim(["q"], 1)
        assert got.body == b"overdue"
    finally:
        waiter.close()


def test_claims_of_several_queues_keep_each_queues_floor(floored):
    floored.queue_declare("r")
    _move_floor(floored, "q")
    _move_floor(floored, "r")
    floored.enqueue_many([NewJob("r", b"r1", priority=3), NewJob("q", b"q1")])
    got = floored.claim(["q", "r"], 5)
    assert [d.body for d in got] == [b"r1", b"q1"]


def test_the_claim_session_uses_and_learns_floors(floored):
    session = floored.session()
    try:
        floored.enqueue_many([NewJob("q", b"s1"), NewJob("q", b"s2")])
        answers = []
        session.claim(["q"], 1, lambda got, more: answers.append(got))
        session.wait()
        assert [d.body for d in answers[0]] == [b"s1"]
        assert floored.floors.snapshot()["q"]
        session.claim(["q"], 1, lambda got, more: answers.append(got))
        session.wait()
        assert [d.body for d in answers[1]] == [b"s2"]
    finally:
        session.close()


# ClaimFloors alone: what it binds and learns, without a database.


def _bands(params: dict) -> list[tuple]:
    return list(zip(params["b_hi"], params["b_lo"], params["b_from"], strict=True))


def test_floors_bind_disjoint_bands_in_claim_order():
    clock = [100.0]
    floors = ClaimFloors(margin=0.5, rescan=10.0, clock=lambda: clock[0])
    params, plan = floors.plan(["q"])  # never a full claim yet: one band, all of it
    assert _bands(params) == [(32767, -32768, float("-inf"))]
    floors.learn(plan, [{"id": 1, "queue": "q", "priority": 5, "was_due": 50.0}])
    floors.learn(plan, [{"id": 2, "queue": "q", "priority": 0, "was_due": 60.0}])
    params, plan = floors.plan(["q"])
    inf = float("-inf")
    assert _bands(params) == [
        (32767, 6, inf),
        (5, 5, 49.5),
        (4, 1, inf),
        (0, 0, 59.5),
        (-1, -32768, inf),
    ]
    clock[0] += 10  # the rescan is due: one full band, noted
    params, _ = floors.plan(["q"])
    assert len(params["b_hi"]) == 1
    assert len(floors.plan(["q"])[0]["b_hi"]) == 5


def test_a_look_behind_the_floors_stands_for_the_full_claim():
    clock = [100.0]
    floors = ClaimFloors(margin=0.0, rescan=10.0, clock=lambda: clock[0], watch=True)
    assert floors.behind() is None  # no floor: claims walk from the head anyway
    _, plan = floors.plan(["q", "r"])  # their full claims
    floors.learn(plan, [{"id": 1, "queue": "q", "priority": 3, "was_due": 50.0}])
    params, at = floors.behind()
    assert _bands(params) == [(3, 3, 50.0)] and params["b_queue"] == ["q"] and at == 100.0
    assert floors.behind() is None  # q not claimed since that look: nothing to send
    floors.plan(["q"])
    params, at = floors.behind()
    clock[0] = 108.0
    floors.looked(params, at, [("q", 42.0)])  # the look found a job behind the floor
    assert floors.snapshot() == {"q": {3: 42.0}}
    clock[0] = 109.9  # q was looked at 100: its claims keep their floors until 110
    assert _bands(floors.plan(["q"])[0])[1] == (3, 3, 42.0)
    assert len(floors.plan(["r"])[0]["b_hi"]) == 1  # r has no floor to look behind
    clock[0] = 110.0  # no look since: the claim walks from the head
    assert len(floors.plan(["q"])[0]["b_hi"]) == 1


def test_two_slow_claims_from_the_head_in_a_row_call_for_the_watch_and_a_quick_look_ends_it():
    floors = ClaimFloors(margin=0.0, rescan=10.0, watch=True, watch_after=0.025)
    assert not floors.watched
    _, full = floors.plan(["q"])
    floors.learn(full, [{"id": 1, "queue": "q", "priority": 0, "was_due": 5.0}])
    _, floored = floors.plan(["q"])
    assert full.full and not floored.full
    assert not floors.walked(full, 0.2)
    assert not floors.walked(full, 0.01)  # not in a row: counted anew
    assert not floors.walked(full, 0.2)
    assert not floors.walked(floored, 9.0)  # a claim from its floor says nothing
    assert floors.walked(full, 0.03) and floors.watched
    assert floors.walked(full, 0.0)  # while watched, a claim restarts a stopped watch
    assert not floors.calm(0.02)  # a look at least half the bound: it goes on
    assert floors.calm(0.01) and not floors.watched
    assert not floors.walked(full, 1.0)
    floors.walked(full, 1.0)
    assert floors.calm(None)  # nothing to look behind: the worker is idle
    always = ClaimFloors(margin=0.0, rescan=10.0, watch=True, watch_after=0.0)
    assert always.watched and not always.calm(None) and not always.calm(0.0)
    never = ClaimFloors(margin=0.0, rescan=10.0, watch=False, watch_after=0.0)
    assert not never.watched and not never.walked(full, 9.0)


def test_a_lowering_heard_during_a_claim_caps_what_it_learns():
    floors = ClaimFloors(margin=0.0, rescan=10.0)
    floors.plan(["q"])  # the full claim
    _, plan = floors.plan(["q"])
    floors.lower("q", 40.0)  # a late job announced while the claim runs
    floors.learn(plan, [{"id": 1, "queue": "q", "priority": 0, "was_due": 70.0}])
    assert floors.snapshot() == {"q": {0: 40.0}}
    floors.lower("q", 30.0)  # after it: the floor itself goes down
    assert floors.snapshot() == {"q": {0: 30.0}}
    floors.lower("q", 90.0)  # a job after the floor: nothing changes
    assert floors.snapshot() == {"q": {0: 30.0}}
    _, plan = floors.plan(["q"])
    floors.reset()  # a waiter listens anew: claims in flight learn nothing
    floors.learn(plan, [{"id": 2, "queue": "q", "priority": 0, "was_due": 80.0}])
    assert floors.snapshot() == {}
    _, plan = floors.plan(["q"])
    floors.lower("q", None)  # announced without a time: the queue's floors go
    floors.learn(plan, [{"id": 3, "queue": "q", "priority": 0, "was_due": 80.0}])
    assert floors.snapshot() == {"q": {0: float("-inf")}}


def test_rescan_zero_binds_the_whole_order_and_learns_nothing():
    floors = ClaimFloors(margin=0.1, rescan=0.0)
    params, plan = floors.plan(["q", "r"])
    assert params["b_queue"] == ["q", "r"] and params["b_hi"] == [32767, 32767]
    floors.learn(plan, [{"id": 1, "queue": "q", "priority": 0, "was_due": 1.0}])
    assert floors.snapshot() == {}


def test_a_forked_child_starts_with_a_free_lock_and_no_floors():
    floors = ClaimFloors(margin=0.0, rescan=10.0)
    params, plan = floors.plan(["q"])
    floors.learn(plan, [{"id": 1, "queue": "q", "priority": 0, "was_due": 5.0}])
    read, write = os.pipe()
    with floors._lock:  # another thread inside the floors when the fork comes
        pid = os.fork()
        if pid == 0:  # the child: a claim plans at once, from the head
            try:
                params, _ = floors.plan(["q"])
                ok = floors.snapshot() == {} and params["b_from"] == [float("-inf")]
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
    os.close(write)
    try:
        answered = select.select([read], [], [], 10)[0]
        assert answered, "the child hung on the lock held at fork"
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        if not answered:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert floors.snapshot() == {"q": {0: 5.0}}
