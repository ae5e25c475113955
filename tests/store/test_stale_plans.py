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

BODY = b'{"body": "stale"}' * 16
COUNT = (
    "SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid))::int FROM pg_class c "
    "WHERE c.oid = %(t)s::regclass "
    "OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(t)s::regclass)"
)


class Prepared:
    """The store's statements prepared on one connection of our own, generic plans."""

    def __init__(self, conn: psycopg.Connection, store: Any, table: str) -> None:
        self.conn, self.store, self.table = conn, store, table
        self.names: dict[str, list[str]] = {}

    def prepare(self, label: str) -> None:
        """Statement ``label`` (``key`` or ``key:variant``: a plan of its own)."""
        query, names = positional(self.store._sql[label.split(":")[0]])
        self.conn.execute(f"PREPARE {self.name(label)} AS {query.decode()}")
        self.names[label] = names

    @staticmethod
    def name(label: str) -> str:
        return label.replace(":", "_")

    def blocks(self, label: str, params: dict[str, Any]) -> int:
        """Blocks ``key`` reads from jobs run with ``params`` (rolled back; the values
        are written as literals, which EXECUTE casts to the statement's own types)."""
        values = self.store._params(params)
        args = [values[n] for n in self.names[label]]
        slots = ", ".join(["%s"] * len(args))
        self.conn.execute("BEGIN")
        try:
            (before,) = self.conn.execute(COUNT, {"t": self.table}).fetchone()
            self.conn.execute(f"EXECUTE {self.name(label)}({slots})", args).fetchall()
            (after,) = self.conn.execute(COUNT, {"t": self.table}).fetchone()
        finally:
            self.conn.execute("ROLLBACK")
        return after - before


def test_statements_planned_on_an_empty_jobs_table_read_as_little_once_it_is_large(pg_target):
    with (
        pg_target.open() as store,
        psycopg.connect(
            pg_target.url, autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as early,
        psycopg.connect(
            pg_target.url, autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as late,
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
        planned_early = Prepared(early, store, jobs)
        for label, params in statements.items():  # planned on the small table, and cached
            planned_early.prepare(label)
            for _ in range(10):  # custom plans five times, then PostgreSQL's choice
                planned_early.blocks(label, params)
        later = store.now() + 3600
        for _ in range(10):
            store.enqueue_many([NewJob("q", BODY, run_at=later) for _ in range(10_000)])
        (pages,) = early.execute("SELECT pg_relation_size(%s) / 8192", (jobs,)).fetchone()
        assert pages > 2_000
        planned_late = Prepared(late, store, jobs)
        for label in statements:
            planned_late.prepare(label)
        early_read = {key: planned_early.blocks(key, p) for key, p in statements.items()}
        late_read = {key: planned_late.blocks(key, p) for key, p in statements.items()}
        # Before migration 16: claim_one 10,050, ack and kill 4,767 (the table, twice).
        assert all(early_read[k] <= late_read[k] + 5 for k in statements), (early_read, late_read)
        assert store.ack([held]) == {held.id}
