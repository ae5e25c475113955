"""What the publish statement costs beyond a plain INSERT of the same row.

    python benchmarks/insert_statements.py [--runs 2000] [--gap 0] [--json FILE]

On alkstore's PostgreSQL engine, in a private schema dropped at the end, one psycopg
connection (autocommit, prepared, as the store's pool runs them) times, interleaved one
after another ``--runs`` times each (``--gap`` seconds of sleep before each: 0.02 for the
cold path of a trickle), with no waiter hearing:

plain INSERT
    the same ~1.2 kB row into ``jobs``, every value a constant or a parameter;
insert_pending
    the statement a publisher runs after a publish nobody heard (no offer read);
insert
    the statement that looks for an idle worker's offer to hand the job off to.

Each with durable commits and with ``synchronous_commit=off`` (the statement's own
server work). Prints p25/p50/p75 in µs (docs/benchmarks.md, "Publishes after one nobody
heard"). Figures to compare, not assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.brokers import PG_URL, drop_schema  # noqa: E402
from kombu_alkstore.store import NewJob, open_store  # noqa: E402

BODY = b"x" * 1200
PLAIN = """INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, max_attempts,
  visibility_timeout, backoff_base, created_at)
VALUES (%(queue)s, %(msg_id)s, %(body)s::bytea, %(priority)s,
  extract(epoch FROM statement_timestamp()), 3, 1800, 1,
  extract(epoch FROM statement_timestamp()))
RETURNING id"""


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    s = sorted(values)
    n = len(s)
    return s[n // 4], s[n // 2], s[3 * n // 4]


def run(runs: int, gap: float) -> dict[str, tuple[float, float, float]]:
    schema = f"inserts_{uuid.uuid4().hex[:8]}"
    out: dict[str, tuple[float, float, float]] = {}
    store = open_store(PG_URL, schema=schema)
    try:
        store.queue_declare("celery")
        params = store._insert_params(NewJob("celery", BODY).checked())
        statements = {
            "plain INSERT": PLAIN.format(jobs=store.names["jobs"]),
            "insert_pending": store._sql["insert_pending"],
            "insert": store._sql["insert"],
        }
        for commit in ("on", "off"):
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"SET synchronous_commit = {commit}")

                def one(sql: str, conn: psycopg.Connection = conn) -> Callable[[], object]:
                    def execute() -> object:
                        params["msg_id"] = uuid.uuid4().hex
                        return conn.execute(sql, params, prepare=True)

                    return execute

                calls = {name: one(sql) for name, sql in statements.items()}
                times: dict[str, list[float]] = {name: [] for name in calls}
                for _ in range(runs):
                    for name, call in calls.items():
                        if gap:
                            time.sleep(gap)
                        t0 = time.perf_counter()
                        call()
                        times[name].append((time.perf_counter() - t0) * 1e6)
                for name, values in times.items():
                    out[f"{name}, synchronous_commit={commit}"] = _quartiles(values)
    finally:
        store.close()
        drop_schema(schema)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000, help="executions of each statement")
    p.add_argument("--gap", type=float, default=0.0, help="seconds of sleep before each")
    p.add_argument("--json", type=Path, help="write the quartiles as JSON")
    args = p.parse_args(argv)
    result = run(args.runs, args.gap)
    print("| statement | p25 µs | p50 µs | p75 µs |")
    print("|---|---:|---:|---:|")
    for name, (q1, q2, q3) in result.items():
        print(f"| {name} | {q1:,.0f} | {q2:,.0f} | {q3:,.0f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
