"""The store's own claim, due checks and ack on ``jobs`` in its four generations
(schema version 17): which plans PostgreSQL makes in the states rotation brings (issue
35; docs/architecture.md "Dead rows behind a pinned horizon: rotating generations").

    python benchmarks/generation_plans.py

On one connection that reaches each statement's generic plan (seven runs) before each
state changes, ``EXPLAIN (ANALYZE, BUFFERS)`` of ``claim_one``, ``has_due``,
``next_due`` and ``ack`` in turn: small; 100,000 delayed jobs, never analyzed; after
the maintenance holder's statistics refresh (which analyzes only generations holding
pages); after ANALYZE of the whole table (empty generations analyzed too, as a manual
``ANALYZE`` does); after ten seconds of rotations with five due jobs published
meanwhile. Prints, per state and statement, the time, the shared buffers and the kinds
of scan, sort and append nodes in the plan. Figures to read, not assertions.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import psycopg

from kombu_alkstore.store import NewJob, open_store

URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


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
        state("100,000 delayed, never analyzed")
        store.refresh_statistics()
        state("after the statistics refresh (generations holding pages)")
        conn.execute(f"ANALYZE {s}.jobs")
        state("after ANALYZE of jobs (empty generations too)")
        end = time.monotonic() + 10
        outcomes = []
        while time.monotonic() < end:
            outcomes.append(store.rotate_generation().outcome)
            time.sleep(0.5)
        store.enqueue_many([NewJob("q", b"{}") for _ in range(5)])
        state(f"after 10 s of rotations ({', '.join(sorted(set(outcomes)))}), five due jobs")
        store.close()
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
