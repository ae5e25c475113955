"""Drain with a concurrency limit, and with a rate limit, against none (issue 32).

    python benchmarks/limits_drain.py [--tasks 2000] [--sleep 0.01] [--workers 4]
                                      [--concurrency 4] [--limit 8] [--engine postgresql]
                                      [--rate 200/s]

Publishes ``--tasks`` tasks (each sleeps ``--sleep`` s, acks_late, prefetch 1) to queue
``celery``, then starts ``--workers`` ``celery worker`` processes (threads pool,
``--concurrency`` each) and times the drain, once with no limit and once with
``queue limit celery --limit``, in a private schema (PostgreSQL) or file (SQLite).
With 4 workers of 4 threads and tasks of 10 ms, no limit runs 16 at once and a limit of 8
at most 8: the ideal drain with a limit is half the tasks' work time per slot count.
With ``--rate R`` a third drain runs under that rate (``queue limit celery --rate R``): its
ideal is tasks / N periods; it prints the most claims the store logged in any period
(never above N) and how long after its window freed each throttled claim came (the
(i + N)-th claim's distance from the i-th, less the period: the wake-up's lateness). A
measurement, not an assertion.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kombu_alkstore.store.rate_values import max_in_window
from kombu_alkstore.store.rates import parse_rate

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def window_stats(logged: list[float], n: int, per: float) -> str:
    """The most claims in any (s, s + per], and the lateness of the throttled claims:
    of each (i + n)-th claim whose distance from the i-th is within 0.5 period of the
    period (so the rate held it back), that distance less the period."""
    times = sorted(logged)
    most = max_in_window(times, per)
    late = sorted(b - a - per for a, b in zip(times, times[n:], strict=False) if b - a < 1.5 * per)
    if not late:
        return f"most in a period {most}/{n}; no throttled claim"
    pick = [late[int(q * (len(late) - 1))] * 1000 for q in (0.5, 0.9, 1.0)]
    return (
        f"most in a period {most}/{n}; throttled claims after their window freed: "
        f"p50 {pick[0]:.1f} ms, p90 {pick[1]:.1f} ms, max {pick[2]:.1f} ms ({len(late)})"
    )


def drain(args: argparse.Namespace, url: str, limit: int | None, rate: str | None = None) -> float:
    """Seconds from the workers' start to an empty queue."""
    from kombu_alkstore.store import open_store

    schema = "ld_" + uuid.uuid4().hex[:10]
    env = dict(
        os.environ,
        ALKSTORE_BENCH_BROKER=f"alkstore+{url}",
        ALKSTORE_BENCH_SCHEMA=schema,
        PYTHONPATH=str(ROOT),
    )
    from celery import Celery

    producer_app = Celery("limits_bench_producer", broker=env["ALKSTORE_BENCH_BROKER"])
    producer_app.conf.broker_transport_options = {"schema": schema}
    store = open_store(url, schema=schema)
    procs: list[subprocess.Popen] = []
    try:
        with producer_app.producer_or_acquire() as producer:
            for _ in range(args.tasks):
                producer_app.send_task("bench.work", (args.sleep,), producer=producer)
        if limit is not None:
            store.set_limit("celery", limit)
        if rate is not None:
            store.set_rate("celery", rate)
            store.set_rate("celery", "1000000/h", key="unused")  # the log keeps every claim
        began = time.monotonic()
        for n in range(args.workers):
            cmd = [sys.executable, "-m", "celery", "-A", "benchmarks.limits_app", "worker"]
            cmd += ["-P", "threads", "-c", str(args.concurrency), "-n", f"w{n}@%h"]
            cmd += ["--loglevel=WARNING"]
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        peak = 0
        while True:
            c = store.counts(["celery"])[0]
            peak = max(peak, c.processing)
            if c.pending + c.processing == 0:
                break
            if time.monotonic() - began > 600:
                raise RuntimeError("the drain took over 600 s")
            time.sleep(0.05)
        took = time.monotonic() - began
        what = f"rate {rate}" if rate is not None else f"limit {limit}"
        print(f"  {what}: drained {args.tasks} in {took:.2f} s, peak claimed {peak}")
        if rate is not None:
            r = parse_rate(rate)
            print(f"    {window_stats(store.claims_logged('celery'), r.n, r.per)}")
        return took
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        store.close()
        producer_app.close()
        if url.startswith("postgresql"):
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> int:
    """Drain with no limit, then with the limit; print both."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--engine", choices=("postgresql", "sqlite"), default="postgresql")
    p.add_argument("--rate", help="also drain under this rate (e.g. 200/s)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        url = PG if args.engine == "postgresql" else f"sqlite:///{tmp}/bench.db"
        print(
            f"{args.engine}: {args.workers} workers x {args.concurrency} threads, "
            f"{args.tasks} tasks of {args.sleep * 1000:g} ms"
        )
        free = drain(args, url, None)
        if args.engine == "sqlite":
            url = f"sqlite:///{tmp}/bench2.db"
        limited = drain(args, url, args.limit)
        if args.rate:
            if args.engine == "sqlite":
                url = f"sqlite:///{tmp}/bench3.db"
            r = parse_rate(args.rate)
            rated = drain(args, url, None, args.rate)
    print(f"  with the limit: {limited / free:.2f}x the time of no limit")
    if args.rate:
        ideal = args.tasks / r.n * r.per
        print(f"  with the rate: {rated:.2f} s, ideal {ideal:.2f} s (tasks / N periods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
