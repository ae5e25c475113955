"""Statements planned while ``jobs`` was empty stay cheap once it is large.

PostgreSQL plans a prepared statement generically once and keeps that plan until the
table's statistics change (ANALYZE, VACUUM, DDL). A worker's claim session prepares its
statements when it starts, often on an empty or freshly truncated ``jobs`` (never
analyzed: the planner takes it for 10 pages), where a sequential scan is the cheapest
way to any row. A burst of 200,000 jobs later, with autovacuum off or not yet round to
the table, every claim that kept such a plan read the whole table: 29 ms a claim
instead of 0.5 (docs/benchmarks.md, "Plans made on an empty jobs table").

Here each statement of a claim's life is prepared (no parameter types, as the claim
session prepares them) and run ten times on the empty table, so PostgreSQL has made its
choice of plan, then run again from that plan after 100,000 delayed jobs were added,
beside the same statements prepared only then. Counted, not timed: the blocks each reads
from ``jobs`` and its indexes, from the transaction's own statistics, rolled back.

A claim and its ends (migration 16's writes by id) hold with no help. A limited claim
(limited_picks: one PL/pgSQL function, its plan many walks and counts) holds once the
maintenance lease holder has gathered the table's statistics anew (store/planner.py),
which each round does when ``jobs`` has grown fourfold: without it, counting a queue's
claims walked the claim index over 25,000 delayed jobs (6,877 blocks against 108).

A session whose caches another session's DDL resets (the shared invalidation queue
overflows under heavy DDL, as when other tests create and drop schemas meanwhile)
replans everything, so without the functions this test fails reliably only on a
quiet server; with them it passes either way.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from kombu_alkstore.maintenance import Maintenance
from kombu_alkstore.store import NewJob
from kombu_alkstore.store.limits import KEY_HEADER
from kombu_alkstore.store.postgres.session import positional
from tests.helpers import blocks_read, table_pages

#: The queues the claims look at: one without a limit, and one of each kind of limit
#: (limited_picks counts their claims and walks their jobs in a function of its own).
QUEUES = ("q", "limit", "keys", "fair")


def body(n: int) -> bytes:
    """A message envelope whose limit key is one of four."""
    return json.dumps({"body": "stale" * 40, "headers": {KEY_HEADER: f"k{n % 4}"}}).encode()


def prepare(conn: psycopg.Connection, store: Any, cases: list[str]) -> dict[str, list[str]]:
    """Each case's statement (its name before any ":") prepared on ``conn`` under a name
    of its own, as the claim session prepares it (no parameter types); its parameters'
    names, in order."""
    names: dict[str, list[str]] = {}
    for case in cases:
        query, names[case] = positional(store._sql[case.partition(":")[0]])
        conn.execute(f"PREPARE {case.replace(':', '_')} AS {query.decode()}")
    return names


def executed_blocks(
    conn: psycopg.Connection, store: Any, names: list[str], case: str, params: dict[str, Any]
) -> int:
    """Blocks the prepared statement of ``case`` reads from jobs, run with ``params``
    (rolled back; the values are written as literals, which EXECUTE casts to its own
    types)."""
    values = store._params(params)
    args = [values[n] for n in names]
    execute = f"EXECUTE {case.replace(':', '_')}({', '.join(['%s'] * len(args))})"
    return blocks_read(conn, store.names["jobs"], execute, args)


def early_and_late(store: Any, url: str, cases: dict[str, dict], refresh: bool) -> tuple:
    """The blocks each case reads once ``jobs`` is large: from plans cached while it was
    small (``early``), and from the same statements prepared only then (``late``). With
    ``refresh``, the maintenance lease holder's :meth:`refresh_statistics` runs between
    the burst and the reads, as it does each round."""
    jobs = store.names["jobs"]
    with (
        psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as early,
        psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as late,
    ):
        (reltuples,) = early.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (jobs,)
        ).fetchone()
        assert reltuples < 0  # never analyzed: what this test is about
        early_names = prepare(early, store, list(cases))
        for case, params in cases.items():  # planned on the small table, and cached
            for _ in range(10):  # custom plans five times, then PostgreSQL's choice
                executed_blocks(early, store, early_names[case], case, params)
        later = store.now() + 3600
        for n in range(10):
            store.enqueue_many(
                [NewJob(QUEUES[n % 4], body(i), run_at=later) for i in range(10_000)]
            )
        pages = table_pages(early, jobs)
        early.rollback()
        assert pages > 2_000
        if refresh:
            assert store.refresh_statistics()
        late_names = prepare(late, store, list(cases))
        early_read = {
            case: executed_blocks(early, store, early_names[case], case, params)
            for case, params in cases.items()
        }
        late_read = {
            case: executed_blocks(late, store, late_names[case], case, params)
            for case, params in cases.items()
        }
        return early_read, late_read


def with_claims(store: Any) -> list:
    """A few jobs in each of :data:`QUEUES`, limited as their names say, and one claim of
    each queue held."""
    store.set_limit("limit", 5)
    store.set_limit("keys", 2, key="*")
    store.set_fair("fair")
    store.enqueue_many([NewJob(q, body(n)) for q in QUEUES for n in range(8)])
    return [store.claim([q], 2)[0] for q in QUEUES]


def test_a_claim_and_its_ends_planned_on_an_empty_jobs_table_read_as_little_once_it_is_large(
    pg_target,
):
    """Without statistics gathered anew: the writes by id of migration 16."""
    with pg_target.open() as store:
        held = with_claims(store)
        handle = {"ids": [held[0].id], "tokens": [held[0].token]}
        cases = {
            "claim_one": store.claim_params(["q"], 4),
            "has_due": store.probe_params(["q"]),
            "next_due": store.probe_params(["q"]),
            "ack": handle,
            "heartbeat": {**handle, "extend": None},
            "pend": {**handle, "delays": [0.0], "refunds": [0]},
            "kill": {**handle, "error": "probe"},
        }
        early, late = early_and_late(store, pg_target.url, cases, refresh=False)
        # Before migration 16: claim_one 9,564 against 59, ack and kill 4,767 against 11.
        assert all(early[c] <= late[c] + 5 for c in cases), (early, late)
        assert store.ack(held) == {h.id for h in held}


def test_limited_claims_planned_on_an_empty_jobs_table_read_as_little_after_a_statistics_refresh(
    pg_target,
):
    """The limited claims (limited_picks: one function, a plan of many walks and counts)
    after refresh_statistics. The sessions plan again on their next run, which reads a
    few index pages of its own (the planner's look at run_at's range): a quarter more."""
    with pg_target.open() as store:
        held = with_claims(store)
        cases = {
            "claim_one:limit": store.claim_params(["limit"], 4),
            "claim_one:keys": store.claim_params(["keys"], 4),
            "claim_one:fair": store.claim_params(["fair"], 4),
        }
        early, late = early_and_late(store, pg_target.url, cases, refresh=True)
        # Without the refresh: claim_one:limit 6,877 against 102-108, claim_one:fair
        # 1,001-1,005 against 539-550 (the claim index walked for a count and a key's jobs).
        assert all(early[c] <= late[c] * 1.25 + 5 for c in cases), (early, late)
        assert store.ack(held) == {h.id for h in held}


def test_the_maintenance_holders_round_gathers_statistics_once_jobs_has_grown(pg_target):
    """Each round asks; only a table grown fourfold (and past 2 MB) is analyzed."""
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as conn,
    ):
        holder = Maintenance(60.0)

        def relpages() -> int:  # its generations' (migration 0017)
            query = (
                "SELECT sum(c.relpages) FROM pg_partition_tree(%s::regclass) t "
                "JOIN pg_class c ON c.oid = t.relid"
            )
            return conn.execute(query, (store.names["jobs"],)).fetchone()[0]

        later = store.now() + 3600
        store.enqueue_many([NewJob("q", body(i), run_at=later) for i in range(100)])
        assert holder.run(store) is not None
        assert relpages() == 0  # small: left alone
        store.enqueue_many([NewJob("q", body(i), run_at=later) for i in range(20_000)])
        holder.run(store)
        assert relpages() > 256
        assert not store.refresh_statistics()  # gathered: nothing to do until it grows again
