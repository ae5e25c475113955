"""jobs in four generations, one emptied in turn (PostgreSQL, schema version 17;
store/generations.py): what a rotation keeps, what it frees behind a pinned horizon,
and several processes publishing, claiming and acking across rotations.

A generation is the server's clock in two-second periods, modulo four, so a job is
copied forward (if still live) six to eight seconds after it was written: these tests
rotate for about ten seconds. The counts are of rows and pages, never of time.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest

from kombu_alkstore.store import ROTATION_CAP, ROTATION_SMALL, NewJob
from kombu_alkstore.store.limits import KEY_HEADER
from tests.helpers import table_pages
from tests.store.test_concurrency import _PRELUDE, run_together

#: Long enough for every generation to be the oldest at least once (4 x 2 s), and more.
ROUNDS = 10.5


def rotate_for(
    store: Any, seconds: float, every: float = 0.25, small_bytes: int = 0
) -> list[tuple[str, int]]:
    """Rotate every ``every`` seconds for ``seconds``, generations of any size (``small_bytes``
    0: these tests' few jobs fit in a page); each rotation's (outcome, moved)."""
    done = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r = store.rotate_generation(small_bytes=small_bytes)
        done.append((r.outcome, r.moved))
        time.sleep(every)
    return done


def generations(conn: psycopg.Connection, store: Any) -> dict[int, int]:
    """The generation of each job, by id."""
    return dict(conn.execute(f"SELECT id, gen FROM {store.names['jobs']}").fetchall())


def keyed(key: str) -> bytes:
    return json.dumps({"body": "k", "headers": {KEY_HEADER: key}}).encode()


def test_a_rotation_keeps_every_job_as_it_was(pg_target):
    """Pending, delayed, claimed (with its token and deadline), unique and limit-keyed
    jobs are copied forward with their ids; the claim's ack and heartbeat land, the key
    is still held, the limit still counts the claimed job, and nothing is claimed twice."""
    with pg_target.open() as store, psycopg.connect(pg_target.url, autocommit=True) as conn:
        store.set_limit("lim", 1)
        pending = store.enqueue_many([NewJob("q", f"p{i}".encode()) for i in range(20)])
        later = store.enqueue("q", b"later", run_at=store.now() + 3600)
        unique = store.enqueue("u", b"u", unique_key="one")
        held = store.claim(["q"], 5)
        limited = store.enqueue_many([NewJob("lim", keyed("a")) for _ in range(2)])
        (limited_held,) = store.claim(["lim"], 5)
        gens_before = generations(conn, store)

        done = rotate_for(store, ROUNDS)

        gens_after = generations(conn, store)
        assert sorted(gens_after) == sorted(gens_before)  # every job, once
        assert all(gens_after[i] != g for i, g in gens_before.items()), (gens_before, done)
        # (the jobs may have been written in two generations: two rotations moved them)
        assert sum(n for o, n in done if o == "rotated") >= len(gens_before), done
        # The claims hold: heartbeat and ack by token land, and nothing is claimed twice.
        assert store.heartbeat(held) == {d.id for d in held}
        assert store.ack(held) == {d.id for d in held}
        assert store.claim(["lim"], 5) == []  # the limit of 1 still counts the claimed job
        assert store.ack([limited_held]) == {limited_held.id}
        (rest,) = (i for i in limited if i != limited_held.id)
        assert [d.id for d in store.claim(["lim"], 5)] == [rest]
        assert store.enqueue("u", b"again", unique_key="one") is None  # the key is held
        got = store.claim(["q"], 100)
        assert sorted(d.id for d in got) == sorted(set(pending) - {d.id for d in held})
        assert later not in {d.id for d in got}  # still delayed
        assert [d.id for d in store.claim(["u"], 5)] == [unique]


def test_a_generation_over_the_cap_is_kept_and_loses_nothing(pg_target):
    """A generation with more than ROTATION_CAP live jobs (a backlog) is not copied
    forward: its jobs stay where they are, and none is lost. (The jobs are published in
    batches that may fall in two generations: four times the cap puts more than it in at
    least one.)"""
    total = 4 * ROTATION_CAP + 4
    with pg_target.open() as store, psycopg.connect(pg_target.url, autocommit=True) as conn:
        store.enqueue_many([NewJob("q", b"x") for _ in range(total)])
        before = generations(conn, store)
        sizes = {g: list(before.values()).count(g) for g in set(before.values())}
        big = {g for g, n in sizes.items() if n > ROTATION_CAP}
        assert big, sizes
        done = rotate_for(store, ROUNDS)
        assert ("kept", ROTATION_CAP + 1) in done, done
        after = generations(conn, store)
        assert sorted(after) == sorted(before)
        assert all(after[i] == g for i, g in before.items() if g in big)  # not moved
        (counts,) = store.counts(["q"])
        assert counts.pending == total


def test_a_generation_a_transaction_holds_is_not_truncated(pg_target):
    """A publish in an open transaction holds its generation's lock: the rotation reports
    busy instead of waiting, and the job commits into the table whole."""
    with pg_target.open() as store, psycopg.connect(pg_target.url) as caller:
        store.enqueue("q", b"first")
        caller.execute(
            f"INSERT INTO {store.names['jobs']} (queue, body, run_at, max_attempts, "
            "visibility_timeout, backoff_base, created_at) "
            "VALUES ('q', 'open', 0, 3, 300, 5, 0)"
        )
        done = rotate_for(store, ROUNDS)
        assert ("busy", 0) in done, done
        caller.commit()
        assert sorted(d.body for d in store.claim(["q"], 5)) == [b"first", b"open"]


def test_a_rotation_never_waits_for_a_lock_a_reader_holds(pg_target):
    """A REPEATABLE READ reader of jobs holds a lock on every generation until its
    transaction ends. A rotation waiting for its lock would queue every claim, publish and
    ack behind it, so it only tries (busy): no lock request of it is ever seen waiting. Once
    the reader is gone, the next rotation has the lock."""
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as conn,
        psycopg.connect(pg_target.url) as reader,
    ):
        jobs = store.names["jobs"]
        for gen in range(4):  # a page in every generation: each rotation tries its lock
            conn.execute(
                f"INSERT INTO {jobs} (queue, body, run_at, max_attempts, visibility_timeout, "
                "backoff_base, created_at, gen) VALUES ('q', 'g', 0, 3, 300, 5, 0, %s)",
                (gen,),
            )
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute(f"SELECT count(*) FROM {jobs}").fetchone()
        done: list[tuple[str, int]] = []
        rotations = threading.Thread(target=lambda: done.extend(rotate_for(store, 2, 0.01)))
        rotations.start()
        waiting = 0
        while rotations.is_alive():
            (n,) = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE NOT l.granted AND c.relnamespace = %s::regnamespace",
                (pg_target.schema,),
            ).fetchone()
            waiting += n
            time.sleep(0.002)
        rotations.join()
        assert waiting == 0
        assert done and {o for o, _ in done} == {"busy"}, done
        reader.commit()
        r = store.rotate_generation(small_bytes=0)
        assert (r.outcome, r.moved) == ("rotated", 1)


def test_a_generation_of_a_page_or_less_is_not_rotated(pg_target):
    """A few live jobs (delayed ones on an idle store) fit in a page: no rotation moves
    them (each TRUNCATE makes every session plan again, for next to nothing freed), and
    the store counts as idle, so the holder's rotations wait longer; bad values are
    refused by name."""
    with pg_target.open() as store, psycopg.connect(pg_target.url, autocommit=True) as conn:
        later = store.now() + 3600
        store.enqueue_many([NewJob("q", b"later", run_at=later) for _ in range(3)])
        before = generations(conn, store)
        done = rotate_for(store, ROUNDS, small_bytes=ROTATION_SMALL)
        assert {o for o, _ in done} == {"idle"}, done
        assert generations(conn, store) == before
        for bad in ({"cap": -1}, {"small_bytes": -1}, {"small_bytes": 1.5}, {"cap": "2000"}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                store.rotate_generation(**bad)


def test_dead_rows_behind_a_pinned_horizon_are_freed(pg_target):
    """An idle transaction holding an XID keeps VACUUM from removing anything; jobs
    published, claimed and acked behind it leave their dead versions in jobs, and the
    rotations free them: once every generation has been the oldest, jobs has no page."""
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url) as pin,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
    ):
        pin.execute("SELECT txid_current()")  # idle in transaction from here on
        jobs = store.names["jobs"]
        for n in range(20):
            if n == 10:  # the other half in the next generation (two-second periods)
                time.sleep(2.0)
            store.enqueue_many([NewJob("q", b"x" * 200) for _ in range(500)])
            while got := store.claim(["q"], 100):
                store.ack(got)
        admin.execute(f"VACUUM {jobs}")  # removes nothing: pinned
        grown = table_pages(admin, jobs)
        assert grown > 100, grown  # 10,000 jobs' dead versions
        done = rotate_for(store, ROUNDS)
        assert table_pages(admin, jobs) == 0, (grown, done)
        assert [o for o, _ in done].count("rotated") >= 2, done
        assert store.vacuum_health().tables  # the status still reads jobs (its parts)
        pin.rollback()


PUBLISH_WORKER = (
    _PRELUDE
    + r"""
from kombu_alkstore.store import NewJob
store = open_store(url, schema=schema, setup=False)
ids, keys = [], 0
end = time.monotonic() + 8
n = 0
while time.monotonic() < end:
    ids += store.enqueue_many([NewJob("q", f"{name}-{n + i}".encode()) for i in range(5)])
    n += 5
    got = store.enqueue("u", b"u", unique_key=f"{name}-{n % 7}")
    if got is not None:
        ids.append(got)
    time.sleep(0.02)  # ~250 jobs/s: the claimers keep up, no generation is over the cap
store.close()
with open(out, "w") as f:
    json.dump({"role": "publish", "ids": ids}, f)
"""
)

CLAIM_WORKER = (
    _PRELUDE
    + r"""
store = open_store(url, schema=schema, setup=False)
acked, empty, end = [], 0, time.monotonic() + 60
while empty < 40 and time.monotonic() < end:
    got = store.claim(["q", "u"], 10)
    if not got:
        empty += 1
        time.sleep(0.05)
        continue
    empty = 0
    # hold some claims across a rotation: heartbeat them, then ack
    if len(acked) % 7 == 0:
        time.sleep(0.3)
        if store.heartbeat(got) != {d.id for d in got}:
            sys.exit("a heartbeat did not land")
    landed = store.ack(got)
    if landed != {d.id for d in got}:
        sys.exit(f"ack did not land for {sorted({d.id for d in got} - landed)}")
    if any(d.attempts != 1 for d in got):
        sys.exit(f"redelivered: {[(d.id, d.attempts) for d in got if d.attempts != 1]}")
    acked += [d.id for d in got]
store.close()
with open(out, "w") as f:
    json.dump({"role": "claim", "ids": acked}, f)
"""
)

ROTATE_WORKER = (
    _PRELUDE
    + r"""
store = open_store(url, schema=schema, setup=False)
outcomes = []
end = time.monotonic() + 14
while time.monotonic() < end:
    outcomes.append(store.rotate_generation().outcome)
    time.sleep(0.05)
store.close()
with open(out, "w") as f:
    json.dump({"role": "rotate", "ids": [], "outcomes": outcomes}, f)
"""
)


@pytest.mark.timeout(180)
def test_processes_publishing_claiming_and_acking_across_rotations_lose_nothing(
    pg_target, tmp_path
):
    """Two publishers (plain and unique jobs), three claimers (some claims held and
    heartbeated across a rotation) and two rotators, as separate processes: every job
    published is acked exactly once, every ack and heartbeat lands, none is redelivered."""
    pg_target.open().close()  # the tables
    codes = [PUBLISH_WORKER] * 2 + [CLAIM_WORKER] * 3 + [ROTATE_WORKER] * 2
    results = run_together(codes, pg_target, tmp_path / "rot", len(codes))
    published = [i for r in results if r["role"] == "publish" for i in r["ids"]]
    acked = [i for r in results if r["role"] == "claim" for i in r["ids"]]
    outcomes = [o for r in results if r["role"] == "rotate" for o in r["outcomes"]]
    assert outcomes.count("rotated") >= 4, {o: outcomes.count(o) for o in set(outcomes)}
    assert len(set(published)) == len(published) > 500
    assert sorted(acked) == sorted(published)  # each once, none lost
    with pg_target.open() as store:
        assert store.claim(["q", "u"], 10) == []
