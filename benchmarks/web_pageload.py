"""Dashboard speed at scale: page loads with 1 M pending and 1 M dead rows on PostgreSQL,
and "requeue all matching" of 100 k dead letters.

    python benchmarks/web_pageload.py [--pending 1000000] [--dead 1000000] [--requests 40]

Makes a private schema (``webbench_<id>``, dropped at the end), fills it server-side
(``INSERT … SELECT generate_series``: Celery protocol-2 messages in 5 queues, 7 task
names, 100 error texts; one dead letter in ten in queue ``bulk``), ``VACUUM ANALYZE``,
then serves the dashboard in this process (uvicorn on a free port) and times each page
from a client (urllib, one request at a time, after one warm-up). Prints a Markdown table
(the one in docs/dashboard.md). Figures to compare, not assertions.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import threading
import time
import urllib.request
import uuid

import psycopg

from kombu_alkstore.store import open_store
from kombu_alkstore.store.admin import DeadFilter

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def envelope() -> str:
    """A Celery message as the transport stores it, with placeholders for SQL to fill."""
    body = base64.b64encode(json.dumps([[1, "ARG"], {}, {}]).encode()).decode()
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": "TASKNAME", "id": "TASKID", "retries": 0},
            "properties": {"correlation_id": "TASKID", "body_encoding": "base64"},
        }
    )


def fill(conn: psycopg.Connection, schema: str, pending: int, dead: int) -> None:
    tpl = envelope()
    body = (
        "convert_to(replace(replace(%(tpl)s, 'TASKID', md5(g::text)), 'TASKNAME', "
        "'tasks.t' || (g %% 7)), 'UTF8')"
    )
    t0 = time.time()
    conn.execute(
        f"""INSERT INTO "{schema}".jobs (queue, msg_id, body, priority, run_at, max_attempts,
            visibility_timeout, backoff_base, created_at)
        SELECT 'q' || (g %% 5), md5(g::text), {body}, g %% 3,
               extract(epoch FROM now()) - 3600 + g * 0.001, 3, 300, 5,
               extract(epoch FROM now()) - 3600
        FROM generate_series(1, %(n)s) g""",
        {"tpl": tpl, "n": pending},
    )
    conn.execute(
        f"""INSERT INTO "{schema}".dead (id, queue, msg_id, body, priority, attempts,
            max_attempts, visibility_timeout, backoff_base, created_at, died_at, last_error)
        SELECT 100000000 + g, CASE WHEN g %% 10 = 0 THEN 'bulk' ELSE 'q' || (g %% 5) END,
               md5(g::text), {body}, 0, 3, 3, 300, 5, extract(epoch FROM now()) - 7200,
               extract(epoch FROM now()) - 7200 + g * 0.005,
               'ValueError: bad input ' || (g %% 100)
        FROM generate_series(1, %(n)s) g""",
        {"tpl": tpl, "n": dead},
    )
    conn.execute(f'VACUUM ANALYZE "{schema}".jobs')
    conn.execute(f'VACUUM ANALYZE "{schema}".dead')
    print(f"filled {pending:,} pending and {dead:,} dead rows in {time.time() - t0:.0f} s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_get(url: str, n: int) -> list[float]:
    with urllib.request.urlopen(url, timeout=60) as r:  # warm-up
        r.read()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as r:
            r.read()
            assert r.status == 200
        out.append((time.perf_counter() - t) * 1000)
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--dead", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--keep", action="store_true", help="keep the schema")
    args = ap.parse_args()

    import uvicorn

    from kombu_alkstore.web import Config, Dashboard
    from kombu_alkstore.web.bulk import BulkRunner

    schema = "webbench_" + uuid.uuid4().hex[:8]
    store = open_store(PG_URL, schema=schema)
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            fill(conn, schema, args.pending, args.dead)
        dash = Dashboard(store, Config(token=None, refresh=5.0, inspect=False))
        refresh = []
        for _ in range(3):
            refresh.append(dash.sampler.take().took * 1000)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(dash.app(), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        some_dead = store.dead_search(DeadFilter(), 1)[0].id
        pages = [
            ("overview", "/"),
            ("queue q1 (peek 20)", "/queues/q1"),
            ("queue q1 (peek 500)", "/queues/q1?n=500"),
            ("dead letters, newest 50", "/dead"),
            ("dead letters, next page", f"/dead?before={time.time() - 3000!r}:0"),
            ("dead letters of queue q3", "/dead?queue=q3"),
            ("dead letters, error contains 'input 42'", "/dead?error=input+42"),
            ("dead letters, error matching none", "/dead?error=no+such+error"),
            ("dead letters, task tasks.t3", "/dead?task=tasks.t3"),
            ("dead letters, task matching none", "/dead?task=tasks.none"),
            ("dead letters, queue q3 + task tasks.t3", "/dead?queue=q3&task=tasks.t3"),
            ("one dead letter", f"/dead/{some_dead}"),
            ("schedules", "/schedules"),
            ("consumers", "/consumers"),
            ("/metrics", "/metrics"),
        ]
        rows = []
        for name, path in pages:
            times = time_get(base + path, args.requests)
            rows.append((name, path, statistics.median(times), p95(times), max(times)))
            print(f"{name:45s} p50 {rows[-1][2]:7.1f} ms  p95 {rows[-1][3]:7.1f} ms")
        server.should_exit = True
        thread.join(10)
        dash.stop()

        print("\n| page | path | p50 ms | p95 ms | max ms |\n|---|---|---:|---:|---:|")
        for name, path, p50, p95_, mx in rows:
            print(f"| {name} | `{path}` | {p50:.0f} | {p95_:.0f} | {mx:.0f} |")
        print(
            f"\nbackground count refresh (5 statements, on the sampler's timer, not on a page "
            f"load): {statistics.median(refresh):.0f} ms median of 3"
        )

        where = DeadFilter(queue="bulk")
        bulk = BulkRunner(store)
        t0 = time.perf_counter()
        job = bulk.run("requeue", where)
        took = time.perf_counter() - t0
        moved = store.size("bulk")
        print(
            f"requeue all matching (queue=bulk): {job.done:,} of {job.total:,} dead letters "
            f"in {took:.1f} s ({job.done / took:,.0f}/s); now pending in bulk: {moved:,}"
        )
    finally:
        store.close()
        if not args.keep:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
