"""The store's statements right after a rotation, as rotations under one pinned xmin pile up.

    python benchmarks/rotation_catalog.py [--at 0,900,1800,3600,7200] [--samples 24]

Each TRUNCATE gives a generation's table, its indexes and its TOAST table new files: it
updates their rows in ``pg_class``, and behind a pinned horizon the old versions stay.
Every session then rebuilds its cache entries of that generation (looking each row up by
oid, through every version of it) and plans its statements again. On alkstore's
PostgreSQL engine, through the Store API, in a private schema of a new store with its
pool held to one connection: one idle-in-transaction session holds an XID; the four
generations are truncated in turn (what ``rotate_generation`` does once per rotation,
without its clock) until ``--at`` rotations are done, and at each mark ``--samples``
times: one more TRUNCATE, then a publish, a claim and an ack (the first after it), then
the same again (steady). Prints the medians, then once more after the pin ends. 900
rotations is 30 minutes of a busy store's (one every two seconds). A measurement, not an
assertion (docs/benchmarks.md, "A pinned xmin, 30 minutes at 500/s, on rotating
generations").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from benchmarks.harness.brokers import PG_URL, drop_schema  # noqa: E402
from benchmarks.harness.pressure_load import Holder, catalogs  # noqa: E402
from kombu_alkstore.store import NewJob, open_store  # noqa: E402

BODY = b"x" * 300


def one_task(store) -> tuple[float, float, float]:
    """Microseconds of a publish, a claim of it and its ack."""
    t0 = time.perf_counter()
    store.enqueue_many([NewJob("q", BODY)])
    t1 = time.perf_counter()
    got = store.claim(["q"], 1)
    t2 = time.perf_counter()
    store.ack(got)
    t3 = time.perf_counter()
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at", default="0,900,1800,3600,7200", help="rotations done at each mark")
    p.add_argument("--samples", type=int, default=24, help="TRUNCATEs timed at each mark")
    args = p.parse_args(argv)
    marks = [int(x) for x in args.at.split(",")]
    schema = "rc_" + uuid.uuid4().hex[:10]
    store = open_store(PG_URL, schema=schema, pool_max_size=1)
    admin = psycopg.connect(PG_URL, autocommit=True)
    holder = None
    done = 0

    def truncate() -> None:
        nonlocal done
        admin.execute(f'TRUNCATE "{schema}".jobs_g{done % 4}')
        done += 1

    def measure(label: str) -> None:
        first, steady = [], []
        for _ in range(args.samples):
            truncate()
            first.append(one_task(store))
            steady.append(one_task(store))
        dead, size = catalogs(admin)["pg_class"]
        f = [statistics.median(x) for x in zip(*first, strict=True)]
        s = [statistics.median(x) for x in zip(*steady, strict=True)]
        print(
            f"{label}: publish / claim / ack µs, the first after a TRUNCATE "
            f"{f[0]:5.0f} / {f[1]:5.0f} / {f[2]:5.0f}, steady {s[0]:5.0f} / {s[1]:5.0f} / "
            f"{s[2]:5.0f}; pg_class {dead:,} dead rows, {size / 1e6:.1f} MB",
            flush=True,
        )

    try:
        for _ in range(20):  # every statement at its generic plan
            one_task(store)
        holder = Holder(PG_URL)  # holds an XID, idle in transaction
        for mark in marks:
            while done < mark:
                truncate()
            measure(f"{done:5d} rotations under the pin")
        holder.close()
        measure("the pin ended             ")
    finally:
        if holder is not None:
            holder.close()
        store.close()
        admin.close()
        drop_schema(schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
