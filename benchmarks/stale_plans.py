"""A claim beside a burst of delayed jobs, from plans its session made on the empty table.

    python benchmarks/stale_plans.py [--delayed 200000] [--claims 50] [--rounds 2]

On alkstore's PostgreSQL engine, through the Store API, in a private schema of a new
store with its pool held to one connection (so every claim runs on the one session and
reaches its generic plans): for a queue without a limit and one with a concurrency
limit, ``--claims`` claims of one job and their acks on the small table, then
``--delayed`` jobs due in an hour, then the same claims again (from the plans made
before the burst), then again after :meth:`Store.refresh_statistics` (what the
maintenance lease holder does each round once ``jobs`` has grown fourfold). Prints the
median milliseconds of a claim in each phase. The server's autovacuum must be off (as
on the development machine) or it may analyze the table meanwhile. A measurement, not
an assertion (docs/benchmarks.md, "Plans made on an empty jobs table").
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import psycopg

from kombu_alkstore.store import NewJob, open_store

URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def claims(store, queue: str, n: int) -> float:
    """Median milliseconds of ``n`` claims of one job of ``queue`` (each acked)."""
    store.enqueue_many([NewJob(queue, b"{}") for _ in range(n)])
    took = []
    for _ in range(n):
        t = time.perf_counter()
        (got,) = store.claim([queue], 1)
        took.append((time.perf_counter() - t) * 1000)
        store.ack([got])
    return statistics.median(took)


def measure(delayed: int, n: int) -> dict[str, float]:
    """One round's medians, by queue and phase."""
    schema = "sp_" + uuid.uuid4().hex[:10]
    store = open_store(URL, schema=schema, pool_max_size=1)
    out: dict[str, float] = {}
    try:
        store.set_limit("limited", 5)
        queues = ("plain", "limited")
        for q in queues:
            out[f"{q} small"] = claims(store, q, n)
        later = time.time() + 3600
        for start in range(0, delayed, 10_000):
            q = queues[(start // 10_000) % 2]
            store.enqueue_many([NewJob(q, b"{}", run_at=later) for _ in range(10_000)])
        for q in queues:
            out[f"{q} stale"] = claims(store, q, n)
        refreshed = store.refresh_statistics()
        for q in queues:
            out[f"{q} refreshed" if refreshed else f"{q} not refreshed"] = claims(store, q, n)
    finally:
        store.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delayed", type=int, default=200_000)
    p.add_argument("--claims", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    for r in range(args.rounds):
        got = measure(args.delayed, args.claims)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
