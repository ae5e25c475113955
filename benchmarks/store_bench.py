"""Store-level throughput on both engines, single process.

    python benchmarks/store_bench.py [--pg URL] [--sqlite PATH] [-n N]

Measures, per engine: enqueue/s one by one, enqueue/s batched (``enqueue_many`` of 100),
and claim+ack/s with a claim batch of 1 and of 10. Each run uses a throwaway PostgreSQL
schema (dropped at the end) and a temporary SQLite file (or throwaway tables in the file
given with ``--sqlite``, dropped at the end). Prints a markdown table. These are figures
to improve on, not assertions.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from kombu_alkstore.store import NewJob, Store, open_store

DEFAULT_PG = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BODY = b'{"task": "proj.tasks.add", "args": [1, 2], "kwargs": {}}' * 4  # ~230 bytes
COLUMNS = [
    ("enqueue", "enqueue/s (one by one)"),
    ("enqueue_many", "enqueue/s (batches of 100)"),
    ("claim1", "claim+ack/s (batch 1)"),
    ("claim10", "claim+ack/s (batch 10)"),
]


def rate(n: int, fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def fill(store: Store, queue: str, n: int) -> None:
    for start in range(0, n, 500):
        store.enqueue_many([NewJob(queue, BODY) for _ in range(min(500, n - start))])


def drain(store: Store, queue: str, n: int, batch: int) -> None:
    done = 0
    while done < n:
        got = store.claim([queue], batch)
        if not got:
            raise RuntimeError(f"queue {queue!r} ran dry after {done} of {n} jobs")
        if len(store.ack(got)) != len(got):
            raise RuntimeError("an ack did not land")
        done += len(got)


def measure(store: Store, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    store.enqueue("warmup", BODY)  # first-use costs (pool, statement preparation)
    store.ack(store.claim(["warmup"], 1))

    def one_by_one() -> None:
        for _ in range(n):
            store.enqueue("one", BODY)

    def batched() -> None:
        for start in range(0, n, 100):
            store.enqueue_many([NewJob("many", BODY) for _ in range(min(100, n - start))])

    out["enqueue"] = rate(n, one_by_one)
    out["enqueue_many"] = rate(n, batched)
    store.purge("one")
    store.purge("many")
    for batch in (1, 10):
        queue = f"claim{batch}"
        fill(store, queue, n)
        out[queue] = rate(n, lambda q=queue, b=batch: drain(store, q, n, b))
    return out


def bench_pg(url: str, n: int) -> dict[str, float]:
    schema = "bench_" + uuid.uuid4().hex[:10]
    store = open_store(url, schema=schema)
    try:
        return measure(store, n)
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def bench_sqlite(path: str | None, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="alkstore-bench-") as tmp:
        db = path or str(Path(tmp) / "bench.db")
        schema = "bench_" + uuid.uuid4().hex[:10]
        store = open_store(f"sqlite:///{db}", schema=schema)
        try:
            return measure(store, n)
        finally:
            tables = [t.name for t in store.tables.all()]
            store.close()
            if path:  # a file we were given: drop only our throwaway tables
                with sqlite3.connect(db) as conn:
                    for name in reversed(tables):
                        conn.execute(f'DROP TABLE IF EXISTS "{name}"')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=DEFAULT_PG, help=f"PostgreSQL URL (default {DEFAULT_PG})")
    parser.add_argument("--sqlite", default=None, help="SQLite file (default: a temporary one)")
    parser.add_argument("-n", type=int, default=2000, help="jobs per measurement (default 2000)")
    parser.add_argument(
        "--engines",
        default="postgresql,sqlite",
        help="comma-separated engines to run (default postgresql,sqlite)",
    )
    args = parser.parse_args(argv)
    if args.n < 100:
        parser.error("-n must be at least 100")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    results: dict[str, dict[str, float]] = {}
    for engine in engines:
        print(f"running {engine} with n={args.n} …", file=sys.stderr)
        if engine == "postgresql":
            results[engine] = bench_pg(args.pg, args.n)
        elif engine == "sqlite":
            results[engine] = bench_sqlite(args.sqlite, args.n)
        else:
            parser.error(f"unknown engine {engine!r}")

    print(
        f"Store throughput, one process, n={args.n}, body {len(BODY)} B "
        f"({platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, SQLite {sqlite3.sqlite_version})\n"
    )
    print("| engine | " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for engine, r in results.items():
        print(f"| {engine} | " + " | ".join(f"{r[key]:,.0f}" for key, _ in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
