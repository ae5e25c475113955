"""The claim statement with no limits, before and after the concurrency limits (issue 32).

    python benchmarks/limits_claim.py --rev REV [--jobs 20000] [--batch 10] [--rounds 3]
                                      [--rate 1000000/s]

On alkstore's PostgreSQL engine, through the Store API, each round and each version (the
working tree's package, and ``git archive REV kombu_alkstore`` in a temporary directory,
alternating which goes first) in its own process and private schema: fill queue ``a``
(and ``b``) with ``--jobs`` jobs, then drain them with ``claim(["a"], batch)`` + ``ack``
(statement ``claim_one``) and ``claim(["a", "b"], batch)`` + ``ack`` (``claim_any``),
printing jobs per second and the mean milliseconds per claim. No queue has a limit: the
figures say what the limit probe costs a user who sets none. With ``--rate R`` both
queues get that rate (set it high enough never to throttle): the figures are then the
rated claim's, its pick under the queues' locks and its log. A measurement, not an
assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def measure(jobs: int, batch: int, rate: str | None = None) -> dict[str, float]:
    """One version's figures (run in a child process whose path holds that version)."""
    import psycopg

    from kombu_alkstore.store import NewJob, open_store

    schema = "lc_" + uuid.uuid4().hex[:10]
    store = open_store(URL, schema=schema)
    out: dict[str, float] = {}
    try:
        for key, queues in (("claim_one", ["a"]), ("claim_any", ["a", "b"])):
            for q in queues:
                if rate is not None:
                    store.set_rate(q, rate)
                for start in range(0, jobs // len(queues), 1000):
                    n = min(1000, jobs // len(queues) - start)
                    store.enqueue_many([NewJob(q, b"{}") for _ in range(n)])
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(f'VACUUM ANALYZE "{schema}".jobs')
            claims, took, done = 0, 0.0, 0
            began = time.perf_counter()
            while True:
                t = time.perf_counter()
                got = store.claim(queues, batch)
                took += time.perf_counter() - t
                if not got:
                    break
                claims += 1
                done += len(got)
                store.ack(got)
            out[f"{key}_jobs_per_s"] = done / (time.perf_counter() - began)
            out[f"{key}_ms_per_claim"] = 1000 * took / max(claims, 1)
    finally:
        store.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


def run_version(path: Path, jobs: int, batch: int, rate: str | None) -> dict[str, float]:
    """:func:`measure` in a child process importing kombu_alkstore from ``path``."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(path)!r}); "
        f"sys.path.insert(1, {str(ROOT)!r}); "
        "from benchmarks.limits_claim import measure; "
        f"print(json.dumps(measure({jobs}, {batch}, {rate!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the medians of each version."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", required=True, help="the git revision to compare against")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", help="a rate for both queues, e.g. 1000000/s (default: none)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp)
        archive = subprocess.run(
            ["git", "archive", args.rev, "kombu_alkstore"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        results: dict[str, list[dict[str, float]]] = {args.rev: [], "working tree": []}
        for r in range(args.rounds):
            order = [(args.rev, old), ("working tree", ROOT)]
            for name, path in order if r % 2 == 0 else reversed(order):
                results[name].append(run_version(path, args.jobs, args.batch, args.rate))
                print(name, json.dumps({k: round(v, 3) for k, v in results[name][-1].items()}))
    rated = f", rate {args.rate}" if args.rate else ""
    print(f"\nmedians of {args.rounds} rounds, {args.jobs} jobs, batch {args.batch}{rated}:")
    for name, rows in results.items():
        med = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
        print(f"  {name:14} {json.dumps(med)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
