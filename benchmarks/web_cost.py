"""What pause/resume costs the hot path: the publish (``insert``) and claim (``claim_one``)
statements timed with and without their paused-queue check, alternately, on one connection
(PostgreSQL); and SQLite's claim+ack with and without its paused filter.

    python benchmarks/web_cost.py [--reps 10] [-n 1500]

The "without" text is the store's own statement with the check removed. Prints medians in
microseconds per statement (the table in docs/dashboard.md). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import uuid

import psycopg

from kombu_alkstore.store import NewJob, open_store

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("-n", type=int, default=1500)
    args = ap.parse_args()
    schema = "webcost_" + uuid.uuid4().hex[:8]
    store = open_store(PG_URL, schema=schema)
    try:
        paused = re.escape(store.tables.qualified(store.tables.paused_queues))
        # The check in either form: the claim's array test, the hand-off's NOT EXISTS.
        check = re.compile(
            r"\s*AND (%\(queue\)s <> ALL\(ARRAY\(SELECT queue FROM " + paused + r"\)\)"
            r"|NOT EXISTS \(SELECT 1 FROM " + paused + r" pq\s+WHERE pq\.queue = "
            r"%\(queue\)s( AND x\.slots > 0)?\))"
        )
        variants = {}
        for key in ("insert", "claim_one"):
            sql = store._sql[key]
            stripped = check.sub("", sql)
            if stripped == sql:
                raise SystemExit(f"no paused-queue check found in {key!r}")
            variants[key] = (sql, stripped)
        store.enqueue_many([NewJob("q", b"x" * 200) for _ in range(args.n * args.reps * 2)])
        insert_params = store._insert_params(NewJob("q", b"x" * 200).checked())
        bind = getattr(store, "claim_params", None)  # the claim floors' bands, since them
        bound = bind(["q"], 1) if bind is not None else {"queues": ["q"], "queue": "q", "limit": 1}
        claim_params = {**bound, **store._params({})}
        claim_params["lockspace"] = getattr(store, "lockspace", 0)
        params = {"insert": insert_params, "claim_one": claim_params}
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for key, (with_check, without) in variants.items():
                res: dict[str, list[float]] = {"with": [], "without": []}
                for rep in range(args.reps):
                    order = [("with", with_check), ("without", without)]
                    if rep % 2:
                        order.reverse()
                    for name, sql in order:
                        t = time.perf_counter()
                        for _ in range(args.n):
                            conn.execute(sql, params[key]).fetchall()
                        res[name].append((time.perf_counter() - t) / args.n * 1e6)
                w, wo = statistics.median(res["with"]), statistics.median(res["without"])
                print(f"| {key} | {wo:.0f} µs | {w:.0f} µs | {w / wo:.3f} |")
            # The server's own time for the claim (EXPLAIN ANALYZE of the generic plan the
            # prepared statement runs), without the client and network noise above.
            conn.execute("SET plan_cache_mode = force_generic_plan")
            server: dict[str, list[float]] = {"with": [], "without": []}
            with_check, without = variants["claim_one"]
            for rep in range(args.reps * 100):
                order = [("with", with_check), ("without", without)]
                if rep % 2:
                    order.reverse()
                for name, sql in order:
                    rows = conn.execute(
                        "EXPLAIN (ANALYZE, SUMMARY, TIMING OFF) " + sql, params["claim_one"]
                    ).fetchall()
                    line = next(r[0] for r in rows if r[0].startswith("Execution Time"))
                    server[name].append(float(line.split(":")[1].split()[0]) * 1000)
            w, wo = statistics.median(server["with"]), statistics.median(server["without"])
            print(f"| claim_one, server execution | {wo:.0f} µs | {w:.0f} µs | +{w - wo:.0f} µs |")
        sqlite_claims(args.reps, args.n)
    finally:
        store.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def sqlite_claims(reps: int, n: int) -> None:
    """SQLite: claim+ack of one job, with and without the paused filter in the claim's
    three statements (probe, spent, pick)."""
    import tempfile

    from kombu_alkstore.store import sqlite as engine

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/cost.db", schema="cost")
        active = engine._IN_ACTIVE.format(
            paused_queues=store.tables.qualified(store.tables.paused_queues)
        )
        keys = ("claim_probe", "claim_pick", "take_spent")
        with_check = {k: store._sql[k] for k in keys}
        without = {k: v.replace(active, engine._IN_QUEUES) for k, v in with_check.items()}
        res: dict[str, list[float]] = {"with": [], "without": []}
        for rep in range(reps):
            order = [("with", with_check), ("without", without)]
            if rep % 2:
                order.reverse()
            for name, sql in order:
                store._sql.update(sql)
                store.enqueue_many([NewJob("q", b"x" * 200) for _ in range(n)])
                t = time.perf_counter()
                for _ in range(n):
                    store.ack(store.claim(["q"], 1))
                res[name].append((time.perf_counter() - t) / n * 1e6)
        store.close()
    w, wo = statistics.median(res["with"]), statistics.median(res["without"])
    print(f"| SQLite claim+ack | {wo:.0f} µs | {w:.0f} µs | {w / wo:.3f} |")


if __name__ == "__main__":
    main()
