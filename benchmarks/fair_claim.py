"""What a claim of a fair queue costs against a plain limited queue (issue 32, fair share).

    python benchmarks/fair_claim.py [--engine postgresql|sqlite] [--flood 10000]
                                    [--few 100] [--keys 1] [--claims 200] [--batch 10]

Through the Store API, in a private schema (PostgreSQL) or a temporary file (SQLite):
queue ``q`` gets ``--flood`` jobs of key A (and, with ``--keys`` above 1, that many more
keys of ``--few`` jobs each, queued after A), then ``--few`` jobs of key B; it has a
concurrency limit far above what is claimed (so it takes the limited claim path), and in
the ``fair`` run also fair share (every share 1). ``--claims`` claims of ``--batch`` are
made and acked; printed: the median and p90 milliseconds per claim and after how many
claims every B job was taken (or never, within the claims made). A measurement, not an
assertion.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid

from kombu_alkstore.store import NewJob, open_store
from kombu_alkstore.store.limits import limit_key_of

PG = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def envelope(key: str, n: int) -> bytes:
    return (
        b'{"body": "e30=", "headers": {"id": "t%d", "alkstore_limit_key": "%s"}, '
        b'"properties": {}}' % (n, key.encode())
    )


def run(url: str, schema: str, fair: bool, args: argparse.Namespace) -> str:
    """One run's line of figures."""
    store = open_store(url, schema=schema)
    try:
        groups = [("A", args.flood)] + [(f"k{i}", args.few) for i in range(args.keys - 1)]
        for key, count in [*groups, ("B", args.few)]:
            for at in range(0, count, 1000):
                store.enqueue_many(
                    [NewJob("q", envelope(key, n)) for n in range(at, min(at + 1000, count))]
                )
        store.set_limit("q", 1_000_000)
        if fair:
            store.set_fair("q")
        times, b_done, b_seen = [], None, 0
        for claim in range(1, args.claims + 1):
            start = time.perf_counter()
            got = store.claim(["q"], args.batch)
            times.append((time.perf_counter() - start) * 1000)
            b_seen += sum(limit_key_of(d.body) == "B" for d in got)
            if b_done is None and b_seen >= args.few:
                b_done = claim
            store.ack(got)
        times.sort()
        p90 = times[int(len(times) * 0.9)]
        after = b_done or f"never (within {args.claims})"
        return (
            f"{'fair' if fair else 'limited'}: claim median {statistics.median(times):.2f} ms, "
            f"p90 {p90:.2f} ms; all of B after {after} claims"
        )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="postgresql", choices=["postgresql", "sqlite"])
    parser.add_argument("--flood", type=int, default=10_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    for fair in (False, True):
        schema = "fc_" + uuid.uuid4().hex[:10]
        if args.engine == "postgresql":
            print(run(PG, schema, fair, args))
            import psycopg

            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        else:
            with tempfile.TemporaryDirectory() as tmp:
                print(run(f"sqlite:///{tmp}/fair.db", schema, fair, args))


if __name__ == "__main__":
    main()
