"""Statements on a held claim (ack, heartbeat, pend, kill) read that claim's rows only,
whatever ANALYZE makes of a table full of dead rows behind a pinned xmin horizon.

Behind a pinned horizon ANALYZE finds a few live rows in ``jobs`` (its statistics say
the table is tiny) while its indexes still hold every dead entry: a plan that joins the
claims named to a whole-index scan (the primary key's, or the partial index of claims
held) looks as cheap as a lookup by id, and costs a read of every dead entry (issue 35:
the pressure benchmark's broker CPU doubled from one ANALYZE to the next). ``held`` in
postgres/queries.sql names a claim by id (an index condition) and token only, not by
state, so the partial index cannot be used and every plan is a lookup.

A real PostgreSQL (``autovacuum = off`` here), each test in its own schema; counted, not
timed: ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement, prepared as psycopg prepares
it, with generic and custom plans, in a transaction rolled back.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from kombu_alkstore.store import NewJob
from tests.helpers import explained_plan, scans_buffers

BODY = b'{"body": "held"}' * 16


def jobs_buffers(conn: psycopg.Connection, sql: str, params: dict, mode: str) -> int:
    """Shared buffers (hit + read) that ``sql`` reads from ``jobs`` and its indexes."""
    conn.execute(f"SET plan_cache_mode = {mode}")
    return scans_buffers(explained_plan(conn, sql, params, prepare=True), "jobs")


def on_claim(held) -> dict[str, dict]:
    """The parameters of each statement on one held claim (ack, heartbeat, pend, kill)."""
    handle = {"ids": [held.id], "tokens": [held.token]}
    return {
        "ack": handle,
        "heartbeat": {**handle, "extend": None},
        "pend": {**handle, "delays": [0.0], "refunds": [0]},
        "kill": {**handle, "error": "probe"},
    }


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_statements_on_a_claim_read_its_rows_only_after_analyze_behind_a_pin(pg_target, mode):
    """4,000 publish + claim + ack cycles behind a pinned horizon (8,000 dead versions,
    every one in the primary key and the claimed jobs' entries in the partial index),
    then ANALYZE: each statement on one held claim reads a handful of buffers. Before
    the change each read 2,303; with the id condition but still naming the state, 371."""
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
        psycopg.connect(pg_target.url) as pin,
    ):
        # A backlog (live rows the planner counts) and a pinned horizon.
        for _ in range(20):
            store.enqueue_many([NewJob("backlog", BODY) for _ in range(1000)])
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        for _ in range(4000):
            store.publish([NewJob("q", BODY)])
            (got,) = store.claim(["q"], 1)
            assert store.ack([got]) == {got.id}
        store.publish([NewJob("q", BODY)])
        (held,) = store.claim(["q"], 1)
        admin.execute(f'ANALYZE "{pg_target.schema}".jobs')
        statements = on_claim(held)
        read = {
            key: jobs_buffers(explain, store._sql[key], store._params(params), mode)
            for key, params in statements.items()
        }
        assert all(n <= 30 for n in read.values()), sorted(read.items())
        assert store.ack([held]) == {held.id}  # the claim was held throughout


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_due_checks_read_from_the_floors_after_analyze_behind_a_pin(pg_target, mode):
    """has_due and next_due after the same cycles and ANALYZE (a delayed job; 1 s
    visibility timeouts, all past when the last claim sets the floor): each reads a
    handful of buffers. next_due steps over the claims whose deadlines lie between the
    floor and the delayed job, none here (each would cost about a buffer). Walking from
    the head, they read 1,300 (has_due) and 1,144 (next_due, a sequential scan)."""
    with (
        pg_target.open(claim_floor_rescan=3600) as store,  # the first claim only is full
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
        psycopg.connect(pg_target.url) as pin,
    ):
        for _ in range(20):
            store.enqueue_many([NewJob("backlog", BODY) for _ in range(1000)])
        store.enqueue_many([NewJob("q", BODY, run_at=store.now() + 3600)])
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        for _ in range(4000):
            store.publish([NewJob("q", BODY, visibility_timeout=1)])
            (got,) = store.claim(["q"], 1)
            assert store.ack([got]) == {got.id}
        time.sleep(1.1)  # every claim's deadline passed; one more claim: the floor is now
        store.publish([NewJob("q", BODY, visibility_timeout=1)])
        (got,) = store.claim(["q"], 1)
        assert store.ack([got]) == {got.id}
        admin.execute(f'ANALYZE "{pg_target.schema}".jobs')
        params = store._params(store.probe_params(["q"]))
        read = {
            key: jobs_buffers(explain, store._sql[key], params, mode)
            for key in ("has_due", "next_due")
        }
        # (45: each seek descends the claim index of four generations, migration 0017;
        # next_due seeks among the due jobs first, then past now)
        assert all(n <= 45 for n in read.values()), sorted(read.items())
        assert store.has_due(["q"]) is False
        assert store.next_due(["q"]) > store.now() + 3000


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_statements_read_a_handful_when_analyze_found_jobs_empty(pg_target, mode):
    """ANALYZE behind a pin when no job is live (a queue drained): reltuples 0, and every
    index of jobs then costs the planner one page. The 500/s pressure run stalled on it
    (a claim's update scanned the whole primary key as a join's outer side; an ack took
    the claim index for its id, 5,045 buffers). 1,000 rounds of 10 jobs published,
    claimed and acked behind the pin, that ANALYZE, then 3 jobs and one held claim: each
    statement reads a handful of buffers. Before the change (the claim's update joined
    to its candidates, the claim index not partial): the claim read 15,111 buffers, and
    with the join gone but the index whole, 293."""
    with (
        pg_target.open(claim_floor_rescan=3600) as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
        psycopg.connect(pg_target.url) as pin,
    ):
        pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
        for _ in range(1000):
            store.enqueue_many([NewJob("q", BODY) for _ in range(10)])
            got = store.claim(["q"], 10)
            assert len(store.ack(got)) == 10
        admin.execute(f'ANALYZE "{pg_target.schema}".jobs')
        (reltuples,) = admin.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
            (f'"{pg_target.schema}".jobs',),
        ).fetchone()
        assert reltuples == 0  # what this test is about
        store.enqueue_many([NewJob("q", BODY) for _ in range(3)])
        (held,) = store.claim(["q"], 1)
        statements = {
            **on_claim(held),
            "claim_one": store.claim_params(["q"], 4),
            "has_due": store.probe_params(["q"]),
            "next_due": store.probe_params(["q"]),
        }
        read = {
            key: jobs_buffers(explain, store._sql[key], store._params(params), mode)
            for key, params in statements.items()
        }
        # (45, as above: a claim or a due check descends the claim index of each of the
        # four generations, and the 1,000 rounds span one to four of them by the
        # machine's speed; a slow machine's claim read 35)
        assert all(n <= 45 for n in read.values()), sorted(read.items())
        assert store.ack([held]) == {held.id}
