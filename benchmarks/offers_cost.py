"""What a publish pays for the offers table's dead versions behind a pinned horizon.

    python benchmarks/offers_cost.py [--versions 0,5000,20000,50000] [--publishes 1500]
                                     [--rev REV] [--json FILE]

On alkstore's PostgreSQL engine, in a private schema dropped at the end: one offer row
(of no consumer of the queue published to, so nothing is handed off), an idle-in-
transaction session holding an XID, then the offer row UPDATEd until it has left
``--versions`` dead versions (each offer and hand-off of a worker is such an UPDATE).
At each count, ``--publishes`` single-job ``Store.publish`` calls are timed (median and
mean, µs) beside the offers table's size in pages. Run it at two revisions (``--rev``)
for a before/after (docs/benchmarks.md, "The hand-off's gate"). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import revision  # noqa: E402

REV = revision.adopt()  # the revision's package before the working tree's

import psycopg  # noqa: E402

from benchmarks.harness.brokers import PG_URL, drop_schema  # noqa: E402
from benchmarks.harness.pressure_load import Holder  # noqa: E402
from kombu_alkstore.store import NewJob, open_store  # noqa: E402

BODY = b'{"body": "offers cost", "headers": {}, "properties": {}}'


def run(args: argparse.Namespace) -> list[dict]:
    schema = "oc_" + uuid.uuid4().hex[:10]
    store = open_store(PG_URL, schema=schema)
    rows: list[dict] = []
    holder = None
    try:
        store.queue_declare("oc")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            offers = f'"{schema}".offers'
            conn.execute(
                f"INSERT INTO {offers} (pid, chan, queues, slots) VALUES (-1, 0, %s, 0)",
                (["not-oc"],),
            )
            holder = Holder(PG_URL)
            done = 0
            for target in args.versions:
                while done < target:
                    conn.execute(f"UPDATE {offers} SET slots = %s WHERE pid = -1", (done % 3,))
                    done += 1
                (pages,) = conn.execute(
                    "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                    (offers,),
                ).fetchone()
                took = []
                for _ in range(args.publishes):
                    t0 = time.perf_counter()
                    store.publish([NewJob("oc", BODY)])
                    took.append((time.perf_counter() - t0) * 1e6)
                row = {
                    "dead_versions": done,
                    "pages": int(pages),
                    "median_us": statistics.median(took),
                    "mean_us": statistics.fmean(took),
                }
                rows.append(row)
                print(
                    f"{done:8,d} dead versions, {pages:4d} pages: publish median "
                    f"{row['median_us']:6.0f} µs, mean {row['mean_us']:6.0f} µs",
                    flush=True,
                )
    finally:
        if holder is not None:
            holder.close()
        store.close()
        drop_schema(schema)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--versions",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[0, 5000, 20000, 50000],
        help="dead versions at which to time (0,5000,20000,50000)",
    )
    p.add_argument("--publishes", type=int, default=1500, help="timed per point (1500)")
    p.add_argument("--json", type=Path, help="write the rows as JSON")
    p.add_argument(
        "--rev",
        default="HEAD",
        help="the kombu_alkstore of this git revision (HEAD); 'worktree': as it is",
    )
    args = p.parse_args(argv)
    if revision.rerunning(args.rev):
        return revision.rerun(args.rev, __file__, sys.argv[1:] if argv is None else argv)
    print(f"# offers cost, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; kombu_alkstore {REV}")
    rows = run(args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
