"""What a publish pays for its NOTIFY: publishes with a waiter hearing, and with none.

    python benchmarks/unheard_publish.py [--procs 1,4] [--publishes 1500] [--rounds 3]
                                         [--json FILE]

On alkstore's PostgreSQL engine, in a private schema dropped at the end, ``--procs``
processes each time ``--publishes`` single-job ``Store.publish`` calls (durable,
confirmed, after 50 warm-up ones), in two cases, interleaved over ``--rounds`` rounds:

heard
    a waiter of the store holds its hearing locks (as an idle worker's does), so every
    publish that is not handed off sends its NOTIFY, as every publish did before fe96d88;
unheard
    no waiter: each publish finds no one hearing and sends none (``unheard`` in
    queries.sql), as with no worker running or every worker busy and quiet.

Prints publishes/s per case and process count (the sum over the processes; median and
range of the rounds). A NOTIFY takes a lock at commit that every notifying commit of the
server waits for, through its WAL flush: what it costs shows with concurrent publishers
(docs/benchmarks.md, "Publishes nobody hears"). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.brokers import PG_URL, drop_schema  # noqa: E402
from kombu_alkstore.store import NewJob, open_store  # noqa: E402

BODY = b'{"body": "unheard publish", "headers": {}, "properties": {}}'
WARM_UP = 50


def _publisher(args: tuple[str, int]) -> float:
    """One process: ``n`` publishes after the warm-up; publishes/s."""
    schema, n = args
    with open_store(PG_URL, schema=schema) as store:
        for _ in range(WARM_UP):
            store.publish([NewJob("q", BODY)])
        t0 = time.perf_counter()
        for _ in range(n):
            store.publish([NewJob("q", BODY)])
        return n / (time.perf_counter() - t0)


def run(procs: list[int], publishes: int, rounds: int) -> dict[str, list[float]]:
    schema = f"unheard_{uuid.uuid4().hex[:8]}"
    rates: dict[str, list[float]] = {}
    store = open_store(PG_URL, schema=schema)
    try:
        store.queue_declare("q")
        for _ in range(rounds):
            for case in ("heard", "unheard"):
                waiter = store.waiter() if case == "heard" else None
                try:
                    for p in procs:
                        with multiprocessing.get_context("spawn").Pool(p) as pool:
                            got = pool.map(_publisher, [(schema, publishes)] * p)
                        rates.setdefault(f"{case} x{p}", []).append(sum(got))
                finally:
                    if waiter is not None:
                        waiter.close()
                store.purge("q")
    finally:
        store.close()
        drop_schema(schema)
    return rates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", default="1,4", help="publishing processes, comma-separated")
    p.add_argument("--publishes", type=int, default=1500, help="per process and case")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="write every round's rates as JSON")
    args = p.parse_args(argv)
    procs = [int(x) for x in args.procs.split(",") if x]
    rates = run(procs, args.publishes, args.rounds)
    print("| case | publishes/s (median) | rounds |")
    print("|---|---:|---|")
    for case, values in rates.items():
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {case} | {statistics.median(values):,.0f} | {shown} |")
    if args.json:
        args.json.write_text(json.dumps(rates, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
