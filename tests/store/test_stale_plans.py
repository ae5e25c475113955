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

A session whose caches another session's DDL resets (the shared invalidation queue
overflows under heavy DDL, as when other tests create and drop schemas meanwhile)
replans everything, so without the functions this test fails reliably only on a
quiet server; with them it passes either way.
"""

from __future__ import annotations

from typing import Any

import psycopg

from kombu_alkstore.store import NewJob
from kombu_alkstore.store.postgres.session import positional
from tests.helpers import blocks_read

BODY = b'{"body": "stale"}' * 16


def prepare(conn: psycopg.Connection, store: Any, keys: list[str]) -> dict[str, list[str]]:
    """Each statement of ``keys`` prepared on ``conn`` under its own name, as the claim
    session prepares it (no parameter types); its parameters' names, in order."""
    names: dict[str, list[str]] = {}
    for key in keys:
        query, names[key] = positional(store._sql[key])
        conn.execute(f"PREPARE {key} AS {query.decode()}")
    return names


def executed_blocks(
    conn: psycopg.Connection, store: Any, names: list[str], key: str, params: dict[str, Any]
) -> int:
    """Blocks the prepared statement ``key`` reads from jobs, run with ``params`` (rolled
    back; the values are written as literals, which EXECUTE casts to its own types)."""
    values = store._params(params)
    args = [values[n] for n in names]
    execute = f"EXECUTE {key}({', '.join(['%s'] * len(args))})"
    return blocks_read(conn, store.names["jobs"], execute, args)


def test_statements_planned_on_an_empty_jobs_table_read_as_little_once_it_is_large(pg_target):
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, cursor_factory=psycopg.ClientCursor) as early,
        psycopg.connect(pg_target.url, cursor_factory=psycopg.ClientCursor) as late,
    ):
        jobs = store.names["jobs"]
        (reltuples,) = early.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (jobs,)
        ).fetchone()
        assert reltuples < 0  # never analyzed: what this test is about
        store.enqueue_many([NewJob("q", BODY) for _ in range(3)])
        (held,) = store.claim(["q"], 1)
        handle = {"ids": [held.id], "tokens": [held.token]}
        statements = {
            "claim_one": store.claim_params(["q"], 4),
            "has_due": store.probe_params(["q"]),
            "next_due": store.probe_params(["q"]),
            "ack": handle,
            "heartbeat": {**handle, "extend": None},
            "pend": {**handle, "delays": [0.0], "refunds": [0]},
            "kill": {**handle, "error": "probe"},
        }
        early_names = prepare(early, store, list(statements))
        for key, params in statements.items():  # planned on the small table, and cached
            for _ in range(10):  # custom plans five times, then PostgreSQL's choice
                executed_blocks(early, store, early_names[key], key, params)
        later = store.now() + 3600
        for _ in range(10):
            store.enqueue_many([NewJob("q", BODY, run_at=later) for _ in range(10_000)])
        (pages,) = early.execute("SELECT pg_relation_size(%s) / 8192", (jobs,)).fetchone()
        early.rollback()
        assert pages > 2_000
        late_names = prepare(late, store, list(statements))
        early_read = {
            key: executed_blocks(early, store, early_names[key], key, params)
            for key, params in statements.items()
        }
        late_read = {
            key: executed_blocks(late, store, late_names[key], key, params)
            for key, params in statements.items()
        }
        # Before migration 16: claim_one 9,564 against 59, ack and kill 4,767 against 11.
        assert all(early_read[k] <= late_read[k] + 5 for k in statements), (early_read, late_read)
        assert store.ack([held]) == {held.id}
