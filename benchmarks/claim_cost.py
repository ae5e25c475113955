"""What ONE claim touches as dead rows pile up behind a pinned xmin horizon (issue 35).

    python benchmarks/claim_cost.py [--cycles 25000] [--every 2500] [--pending N]
                                    [--no-pin] [--no-floor] [--floor-margin S]
                                    [--json FILE]

On alkstore's PostgreSQL engine, through the Store API (``open_store``, ``publish``,
``claim``, ``ack``), in a private schema dropped at the end:

1. fill queue ``cc`` with ``--pending`` jobs (default: cycles + 1,000), then
   ``VACUUM ANALYZE`` the jobs table (a clean start, as autovacuum would leave it);
2. pin the horizon: one session ``BEGIN; SELECT txid_current();`` idle in transaction
   until the end (``--no-pin``: none, the control);
3. run ``--cycles`` publish + claim + ack cycles, one job each: each claim takes the
   oldest pending job (the claim order), and its claim (an UPDATE) and ack (a DELETE)
   leave two dead row versions behind, at the head of the claim index's order;
4. at 0, 100, 500, 1,000 and every ``--every`` cycles, ``EXPLAIN (ANALYZE, BUFFERS,
   FORMAT JSON)`` the store's own claim statement (``claim_one`` of queries.sql, with the
   parameters ``store.claim(["cc"], 1)`` binds) in a transaction rolled back, and print:
   the jobs table's dead tuples (``pg_stat_user_tables.n_dead_tup``), the shared buffers
   (hit + read) the whole statement touched and those of its scan of ``jobs``, the rows
   that scan returned and removed by filter, and the mean wall time of the last 100 real
   claims.

A measurement, not an assertion: the issue asks for a test of it later.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
from kombu_alkstore.store.postgres.statements import claim_key, claim_params  # noqa: E402

QUEUE = "cc"
BODY = b'{"body": "claim cost", "headers": {}, "properties": {}}'


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _buffers(node: dict) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def explain(conn: psycopg.Connection, store, schema: str) -> dict:
    """The claim statement under EXPLAIN ANALYZE, rolled back: what one claim touches."""
    key = claim_key([QUEUE])
    # What the store's claim binds now (its claim floors, since they were built; a
    # revision before them has none).
    bind = getattr(store, "claim_params", None)
    bound = bind([QUEUE], 1) if bind is not None else claim_params([QUEUE], 1)
    sql, params = store._sql[key], store._params(bound)
    try:
        doc = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()[0]
    finally:
        conn.rollback()
    top = doc[0]
    plan = top["Plan"]
    due = next((n for n in _nodes(plan) if n.get("Subplan Name") == "CTE due"), plan)
    # The candidate walk: the scans of jobs in CTE "due" (due_one's, LockRows above: one
    # before the claim floors; since them, one per kind of band, each run once per band).
    scans = [
        n for n in _nodes(due) if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]
    ]
    names = dict.fromkeys(f"{n['Node Type']} {n.get('Index Name', '')}".strip() for n in scans)
    return {
        "statement_buffers": _buffers(plan),
        "scan": " + ".join(names) or "?",
        "scan_buffers": sum(_buffers(n) for n in scans),
        "scan_rows": sum(int(n.get("Actual Rows", 0)) for n in scans),
        "removed_by_filter": sum(int(n.get("Rows Removed by Filter", 0)) for n in scans),
        "heap_fetches": sum(int(n.get("Heap Fetches") or 0) for n in scans),
        "execution_ms": top.get("Execution Time"),
        "planning_buffers": _buffers(top.get("Planning", {})),
    }


def dead_tuples(conn: psycopg.Connection, schema: str) -> tuple[int, int]:
    """(n_dead_tup, n_live_tup) of the jobs table (the store's backends flush their counts
    within 10 s of going idle: the caller waits that long first)."""
    row = conn.execute(  # summed over its generations (schema version 17)
        "SELECT sum(n_dead_tup), sum(n_live_tup) FROM pg_stat_user_tables "
        "WHERE relid IN (SELECT relid FROM pg_partition_tree(%s::regclass))",
        (f'"{schema}".jobs',),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row and row[0] is not None else (0, 0)


def sizes(conn: psycopg.Connection, schema: str) -> tuple[float, float]:
    """(heap MB, indexes MB) of the jobs table."""
    row = conn.execute(  # summed over its generations (schema version 17)
        "SELECT sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)) "
        "FROM pg_partition_tree(%s::regclass) WHERE isleaf",
        (f'"{schema}".jobs',),
    ).fetchone()
    return row[0] / 1e6, row[1] / 1e6


def run(args: argparse.Namespace) -> list[dict]:
    schema = "cc_" + uuid.uuid4().hex[:10]
    pending = args.pending or args.cycles + 1000
    points = sorted({0, 100, 500, 1000, *range(0, args.cycles + 1, args.every)})
    points = [p for p in points if p <= args.cycles]
    rows: list[dict] = []
    store = holder = stats = explainer = None
    try:
        extra: dict = {"claim_floor_rescan": 0} if args.no_floor else {}
        if args.floor_margin is not None:
            extra["claim_floor_margin"] = args.floor_margin
        store = open_store(PG_URL, schema=schema, **extra)
        store.queue_declare(QUEUE)
        t0 = time.monotonic()
        for i in range(0, pending, 1000):
            store.enqueue_many([NewJob(QUEUE, BODY) for _ in range(min(1000, pending - i))])
        stats = psycopg.connect(PG_URL, autocommit=True, application_name="bench_cc_stats")
        stats.execute(f'VACUUM ANALYZE "{schema}".jobs')
        print(f"# schema {schema}: {pending:,} pending jobs in {time.monotonic() - t0:.1f}s")
        explainer = psycopg.connect(PG_URL, application_name="bench_cc_explain")
        if not args.no_pin:
            holder = Holder(PG_URL)
            print(f"# horizon pinned: backend {holder.pids[0]} holds xid {holder.xid}")
        else:
            print("# no pinned horizon (control)")
        print(
            f"{'cycles':>7} {'dead':>7} {'heapMB':>6} {'idxMB':>6} "
            f"{'stmt buf':>8} {'scan buf':>8} {'filtered':>8} {'exec ms':>8} "
            f"{'claim ms':>8}  scan"
        )
        claim_times: list[float] = []
        done = 0
        for point in points:
            while done < point:
                store.publish([NewJob(QUEUE, BODY)])
                c0 = time.perf_counter()
                got = store.claim([QUEUE], 1)
                claim_times.append(time.perf_counter() - c0)
                if not got:
                    raise RuntimeError(f"nothing to claim at cycle {done}")
                store.ack(got)
                done += 1
            # An idle backend flushes its table statistics within 10 s (PostgreSQL 15).
            time.sleep(args.settle)
            dead, live = dead_tuples(stats, schema)
            heap_mb, idx_mb = sizes(stats, schema)
            e = explain(explainer, store, schema)
            last = claim_times[-100:]
            row = {
                "cycles": done,
                "dead": dead,
                "live": live,
                "heap_mb": heap_mb,
                "index_mb": idx_mb,
                "claim_ms": 1000 * sum(last) / len(last) if last else None,
                **e,
            }
            rows.append(row)
            claim_ms = "-" if row["claim_ms"] is None else f"{row['claim_ms']:.2f}"
            print(
                f"{done:7d} {dead:7d} {heap_mb:6.1f} {idx_mb:6.1f} "
                f"{e['statement_buffers']:8d} {e['scan_buffers']:8d} "
                f"{e['removed_by_filter']:8d} {e['execution_ms']:8.2f} {claim_ms:>8}  "
                f"{e['scan']}",
                flush=True,
            )
    finally:
        for part in (holder,):
            if part is not None:
                part.close()
        for conn in (explainer, stats):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        drop_schema(schema)
    return rows


def markdown(rows: list[dict], pinned: bool) -> str:
    head = "pinned horizon" if pinned else "no pinned horizon (control)"
    out = [
        f"| cycles | dead rows in jobs ({head}) | buffers per claim (statement) | of which "
        "the jobs scan | rows removed by filter | EXPLAIN ms | real claim ms (last 100) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        claim_ms = "-" if r["claim_ms"] is None else f"{r['claim_ms']:.2f}"
        out.append(
            f"| {r['cycles']:,} | {r['dead']:,} | {r['statement_buffers']:,} | "
            f"{r['scan_buffers']:,} | {r['removed_by_filter']:,} | {r['execution_ms']:.2f} | "
            f"{claim_ms} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=25_000, help="publish+claim+ack (25000)")
    p.add_argument("--every", type=int, default=2500, help="measure every N cycles (2500)")
    p.add_argument("--pending", type=int, help="jobs filled first (cycles + 1000)")
    p.add_argument("--no-pin", action="store_true", help="the control: no pinned horizon")
    p.add_argument("--floor-margin", type=float, help="the claim_floor_margin option (s)")
    p.add_argument(
        "--no-floor", action="store_true", help="claims without claim floors (claim_floor_rescan 0)"
    )
    p.add_argument("--settle", type=float, default=11.0, help="wait before a measure (11 s)")
    p.add_argument("--json", type=Path, help="write the rows as JSON")
    p.add_argument(
        "--rev",
        default="HEAD",
        help="the kombu_alkstore of this git revision (HEAD); "
        "'worktree': the working tree as it is",
    )
    args = p.parse_args(argv)
    if revision.rerunning(args.rev):
        return revision.rerun(args.rev, __file__, sys.argv[1:] if argv is None else argv)
    import kombu_alkstore

    print(
        f"# claim cost, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; kombu_alkstore {REV} "
        f"({Path(kombu_alkstore.__file__).parent})"
    )
    try:
        rows = run(args)
    except KeyboardInterrupt:
        print("interrupted: the session closed and the schema dropped", file=sys.stderr)
        return 130
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print()
    print(markdown(rows, not args.no_pin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
