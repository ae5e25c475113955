"""What one job costs a PostgreSQL primary: statements, WAL bytes and server CPU per job
for publish → claim → ack, on a private cluster (nothing else runs on it).

    python benchmarks/job_cost.py [--jobs 20000] [--batch 16]

Publishes one job per statement (durable commits), claims in batches of ``--batch`` and
acks each batch in one statement, as a busy prefork worker does. Server CPU is the sum of
utime+stime of the cluster's processes (from /proc) over the run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from benchmarks.harness.procs import proc_stats  # noqa: E402
from kombu_alkstore.store import open_store  # noqa: E402
from tests.private_pg import private_cluster  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(data_dir: str) -> float:
    """CPU seconds used so far by the postmaster and its live children, and (through the
    postmaster's cutime and cstime) by those that ended."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    ticks = 0
    for pid, fields in proc_stats():
        if postmaster in (pid, int(fields[1])):  # fields[1]: the parent's pid
            ticks += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / TICKS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    with private_cluster() as cluster:
        store = open_store(cluster.url, schema="cost")
        body = b'{"body": "W1tdLCB7fSwgeyJjYWxsYmFja3MiOiBudWxsfV0=", "headers": {}}' * 8
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            lsn0 = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            cpu0, t0 = server_cpu(cluster.data), time.time()
            for _ in range(args.jobs):
                store.enqueue("q", body)
            cpu1 = server_cpu(cluster.data)
            lsn1 = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            statements = args.jobs
            while True:
                held = store.claim(["q"], args.batch)
                statements += 2
                if not held:
                    break
                store.ack(held)
            cpu2, t2 = server_cpu(cluster.data), time.time()
            lsn2 = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            wal = admin.execute(
                "SELECT pg_wal_lsn_diff(%s, %s), pg_wal_lsn_diff(%s, %s)",
                (lsn1, lsn0, lsn2, lsn1),
            ).fetchone()
        store.close()
    n = args.jobs
    print(f"jobs {n}, claim batch {args.batch}, body {len(body)} bytes, {t2 - t0:.1f} s")
    print(f"statements per job: {statements / n:.2f} (1 publish, claim+ack per batch)")
    print(
        f"WAL bytes per job: publish {wal[0] / n:.0f}, claim+ack {wal[1] / n:.0f}, "
        f"total {(wal[0] + wal[1]) / n:.0f}"
    )
    print(
        f"server CPU per job: publish {1e6 * (cpu1 - cpu0) / n:.0f} us, claim+ack "
        f"{1e6 * (cpu2 - cpu1) / n:.0f} us, total {1e6 * (cpu2 - cpu0) / n:.0f} us"
    )


if __name__ == "__main__":
    main()
