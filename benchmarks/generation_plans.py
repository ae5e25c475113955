"""The store's own claim, due checks and ack on ``jobs`` split into four generations:
which plans PostgreSQL makes in the states rotation would bring (issue 35, the design in
docs/architecture.md "Dead rows behind a pinned horizon: rotating generations").

    python benchmarks/generation_plans.py

Not the broker's layout (``jobs`` is one table): a fresh store's ``jobs`` is rebuilt by
hand as ``PARTITION BY LIST (gen)`` into four generations, primary key ``(id, gen)``,
its indexes and triggers made again on it and migration 16's functions made again for
its row type; publishes go to the generation the column default names. Then, on one
connection that reaches each statement's generic plan (seven runs) before each state
changes, ``EXPLAIN (ANALYZE, BUFFERS)`` of ``claim_one``, ``has_due``, ``next_due`` and
``ack`` in turn: small; 100,000 delayed jobs in generation 0, never analyzed; after
ANALYZE; after a TRUNCATE of generation 1; generation 1 current with five due jobs.
Prints, per state and statement, the time, the shared buffers and the kinds of scan,
sort and append nodes in the plan. Figures to read, not assertions.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import psycopg

from kombu_alkstore.store import NewJob, open_store
from kombu_alkstore.store.schema import migrations

URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def partition(conn: psycopg.Connection, schema: str) -> None:
    """Rebuild the (empty) store's jobs as four generations, in one transaction."""
    s = f'"{schema}"'
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
        "AND tablename = 'jobs' AND indexname NOT IN ('jobs_pkey', 'jobs_unique')",
        (schema,),
    ).fetchall()
    triggers = conn.execute(
        "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
        "WHERE tgrelid = %s::regclass AND NOT tgisinternal",
        (f"{s}.jobs",),
    ).fetchall()
    (sequence,) = conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (f"{s}.jobs",)).fetchone()
    with conn.transaction():
        conn.execute(f"DROP FUNCTION {s}.delete_rows, {s}.claim_rows")
        conn.execute(f"ALTER TABLE {s}.jobs RENAME TO jobs_plain")
        conn.execute(
            f"CREATE TABLE {s}.jobs (LIKE {s}.jobs_plain INCLUDING DEFAULTS INCLUDING "
            "CONSTRAINTS, gen SMALLINT NOT NULL DEFAULT 0, PRIMARY KEY (id, gen)) "
            "PARTITION BY LIST (gen)"
        )
        for g in range(4):
            conn.execute(f"CREATE TABLE {s}.jobs_g{g} PARTITION OF {s}.jobs FOR VALUES IN ({g})")
        conn.execute(f"ALTER SEQUENCE {sequence} OWNED BY {s}.jobs.id")
        conn.execute(f"DROP TABLE {s}.jobs_plain")
        for _, definition in indexes:
            conn.execute(definition)
        for (definition,) in triggers:
            conn.execute(definition)
        for m in migrations(schema, "postgresql").migrations:
            if m.version == 16:
                for statement in m.statements:
                    conn.execute(statement)


def explain(store: Any, key: str, params: dict[str, Any]) -> str:
    """One line: statement ``key``'s time, buffers and plan nodes, from its generic plan."""
    sql, bound = store._sql[key], store._params(params)
    with psycopg.connect(URL) as conn:
        for _ in range(7):
            conn.cursor().execute(sql, bound, prepare=True).fetchall()
            conn.rollback()
        (doc,) = (
            conn.cursor()
            .execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, bound, prepare=False)
            .fetchone()
        )
        conn.rollback()
    plan, nodes, stack = doc[0]["Plan"], set(), [doc[0]["Plan"]]
    while stack:
        node = stack.pop()
        stack.extend(node.get("Plans", []))
        kind = node["Node Type"]
        if "Scan" in kind and "Relation Name" in node:
            nodes.add(f"{kind}({node['Relation Name']})")
        elif kind in ("Sort", "Merge Append"):
            nodes.add(kind)
    blocks = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return f"{key:9s} {plan['Actual Total Time']:6.2f} ms {blocks:5d} buffers  {sorted(nodes)}"


def main() -> int:
    schema = "gp_" + uuid.uuid4().hex[:10]
    conn = psycopg.connect(URL, autocommit=True)
    s = f'"{schema}"'
    try:
        open_store(URL, schema=schema).close()
        partition(conn, schema)
        store = open_store(URL, schema=schema, pool_max_size=1)
        store.enqueue_many([NewJob("q", b"{}") for _ in range(5)])

        def state(label: str) -> None:
            (held,) = store.claim(["q"], 1)
            print(f"-- {label}")
            for key, params in {
                "claim_one": store.claim_params(["q"], 4),
                "has_due": store.probe_params(["q"]),
                "next_due": store.probe_params(["q"]),
                "ack": {"ids": [held.id], "tokens": [held.token]},
            }.items():
                print("   " + explain(store, key, params))

        state("small")
        later = time.time() + 3600
        for _ in range(10):
            store.enqueue_many([NewJob("q", b"{}", run_at=later) for _ in range(10_000)])
        store.enqueue_many([NewJob("q", b"{}") for _ in range(5)])
        state("100,000 delayed in generation 0, never analyzed")
        conn.execute(f"ANALYZE {s}.jobs")
        state("after ANALYZE (generations 1-3 empty)")
        conn.execute(f"TRUNCATE {s}.jobs_g1")
        state("after TRUNCATE of generation 1")
        conn.execute(f"ALTER TABLE {s}.jobs ALTER COLUMN gen SET DEFAULT 1")
        store.enqueue_many([NewJob("q", b"{}") for _ in range(5)])
        state("generation 1 current, five due jobs in it")
        store.close()
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
