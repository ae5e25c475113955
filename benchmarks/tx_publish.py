#!/usr/bin/env python3
"""Publish rate: 1,000 ``.delay()`` inside one transaction vs 1,000 separate publishes.

    python benchmarks/tx_publish.py [--n 1000] [--rounds 3] [--pg postgresql://…/test]

For each engine (SQLite in a temporary file; PostgreSQL at ``--pg``, default
``$ALKSTORE_TEST_PG`` or ``postgresql://postgres@127.0.0.1:5432/test``, in a throw-away
schema), with no worker running, it times:

* ``one transaction``   — ``with kombu_alkstore.transaction(conn):`` N × ``.delay()``, one commit;
* ``separate publishes`` — N × ``.delay()`` through the broker's own connection (each its own
  commit: the usual non-transactional publish);
* ``one tx each``       — N × (open transaction, ``.delay()``, commit) on the caller's
  connection: one transactional publish per request.

Prints the best of ``--rounds`` rounds per case, in tasks/s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from celery import Celery

import kombu_alkstore


def make(broker_url: str, schema: str) -> tuple[Celery, object]:
    app = Celery("bench", broker=broker_url, set_as_current=False)
    app.conf.update(broker_transport_options={"schema": schema})

    @app.task(shared=False, name="bench.noop")
    def noop(i):
        return i

    with app.connection_for_write() as conn:  # open the broker (tables, WAL) once
        conn.ensure_connection()
    return app, noop


def count_and_purge(app: Celery) -> int:
    with app.connection_for_write() as conn:
        conn.ensure_connection()
        store = conn.transport.store
        n = sum(c.pending for c in store.counts(["celery"]))
        store.purge("celery")
        return n


def run_case(case: str, app: Celery, task, connect, n: int) -> float:
    task.delay(-1)  # warm up: producer pool, declarations, routing cache
    count_and_purge(app)
    conn = connect()
    try:
        t0 = time.perf_counter()
        if case == "one transaction":
            with kombu_alkstore.transaction(conn):
                for i in range(n):
                    task.delay(i)
            conn.commit()
        elif case == "separate publishes":
            for i in range(n):
                task.delay(i)
        else:  # one tx each
            for i in range(n):
                with kombu_alkstore.transaction(conn):
                    task.delay(i)
                conn.commit()
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    published = count_and_purge(app)
    assert published == n, (case, published)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pg",
        default=os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    cases = ["one transaction", "separate publishes", "one tx each"]
    tmp = Path(tempfile.mkdtemp(prefix="alkstore-txbench-"))
    schema = "bench_" + uuid.uuid4().hex[:8]
    engines = {
        "sqlite": (
            f"alkstore+sqlite:///{tmp / 'bench.db'}",
            lambda: sqlite3.connect(tmp / "bench.db"),
        ),
        "postgresql": (f"alkstore+{args.pg}", lambda: psycopg.connect(args.pg)),
    }
    print(f"{args.n} tasks per case, best of {args.rounds} rounds, no worker running")
    print(f"{'engine':<11} {'case':<20} {'seconds':>8} {'tasks/s':>9}")
    try:
        for engine, (url, connect) in engines.items():
            app, task = make(url, schema)
            for case in cases:
                best = min(run_case(case, app, task, connect, args.n) for _ in range(args.rounds))
                print(f"{engine:<11} {case:<20} {best:8.3f} {args.n / best:9.0f}")
    finally:
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
