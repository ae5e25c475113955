"""MVCC pressure on a PostgreSQL broker (issue 35): a real Celery app and ``celery worker``
(prefork 2, Celery's defaults) at a steady offered load, through three phases: baseline,
pressure, recovery.

    python benchmarks/pressure.py [--brokers alkstore-postgresql,pgmq]
        [--pressure xmin,readers] [--rate 100] [--baseline 60] [--hold 240]
        [--recovery 90] [--vacuum-like-autovacuum] [--json FILE]

Pressure kinds:

xmin
    one session ``BEGIN; SELECT txid_current();`` then idle in transaction for the whole
    pressure phase: the xmin horizon is pinned, no dead tuple of the broker's tables can
    be removed (the issue's full version holds it 30 minutes: ``--hold 1800``).
readers
    four REPEATABLE READ sessions, each one transaction for the whole phase, looping
    ``SELECT count(*), min(id), max(id)`` over the queue table (alkstore's ``jobs``,
    pgmq's ``q_celery``) with 0.1 s between scans, as the public harness
    (hardbyte/postgresql-job-queue-benchmarking, ``active-readers``) does.

A publisher subprocess sends ``bench.probe(send_time)`` every 1/R s on a fixed schedule
(an open loop: when it falls behind it catches up); each task records its own start time
(an ``O_APPEND`` line, never the broker). Per 5 s window: tasks finished/s against the
offered rate, p50/p99 pickup latency (publish → task start), backlog (published −
finished), the publisher's lag, dead tuples and total size of the broker's tables
(``pg_stat_user_tables``), PostgreSQL's CPU (every ``postgres`` process, from /proc; the
broker's own backends apart; the readers' apart), the readers' scan time, and what the
broker's active backends wait on (sampled once a second). After the recovery phase the
publisher stops and the backlog drains: lost = published − run.

Each broker session gets a private place (see harness/brokers.py: a schema for alkstore,
a database for pgmq), dropped at the end with every process and session started here,
also on Ctrl-C or failure. Figures to read, not assertions: nothing here checks a timing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from benchmarks.harness.brokers import PG_URL, Place, make_place, pg_url_for  # noqa: E402
from benchmarks.harness.cli import checkout  # noqa: E402
from benchmarks.harness.pressure_load import (  # noqa: E402
    Holder,
    Publisher,
    Readers,
    Records,
    Sampler,
    Vacuumer,
    log,
)
from benchmarks.harness.pressure_report import (  # noqa: E402
    Window,
    cpu_by_pid,
    machine_note,
    print_window,
    summarize,
    summary_markdown,
    window_header,
)
from benchmarks.harness.procs import Worker, log_problems, tail  # noqa: E402
from benchmarks.harness.session import (  # noqa: E402
    Config,
    percentile,
    percentile_or_none,
    session_env,
)
from benchmarks.harness.tasks_module import TASKS_MODULE, TASKS_SOURCE  # noqa: E402

BROKERS = ("alkstore-postgresql", "pgmq")
KINDS = ("xmin", "readers")


def _where(place: Place) -> tuple[str, str, str, str]:
    """(psycopg URL of its database, schema of its tables, the queue table, a LIKE pattern
    matching its backends' statements)."""
    if place.schema:
        return PG_URL, place.schema, f'"{place.schema}".jobs', f"%{place.schema}%"
    return pg_url_for(place.database), "pgmq", "pgmq.q_celery", "%"


def _scan_sql(table: str, schema: str) -> str:
    key = "msg_id" if schema == "pgmq" else "id"
    return f"SELECT count(*), min({key}), max({key}) FROM {table}"


def run_one(broker: str, kind: str, args: argparse.Namespace, workdir: Path) -> dict:
    """One session: place, worker, publisher, the three phases, the drain, the cleanup."""
    tag = f"{broker}-{kind}-{int(time.time())}"
    record, logfile = workdir / f"{tag}.record", workdir / f"{tag}.log"
    result: dict = {"broker": broker, "kind": kind, "windows": [], "notes": []}
    place = worker = publisher = sampler = vacuumer = None
    pressure: Holder | Readers | None = None
    try:
        place = make_place(broker, workdir)
        db_url, schema, table, match = _where(place)
        worker_env, client_env = session_env(place, record, None, workdir, Config())
        if args.rev_path is not None:  # the revision's package first (as --rev of run.py)
            for env in (worker_env, client_env):
                env["PYTHONPATH"] = os.pathsep.join([str(args.rev_path), env["PYTHONPATH"]])
        total = args.baseline + args.hold + args.recovery
        worker = Worker(workdir, worker_env, logfile, "prefork", args.loglevel)
        publisher = Publisher(workdir, client_env, logfile, args.rate, total)
        records = Records(record)
        deadline = time.monotonic() + 60
        while records.total == 0:  # the warm-up task ran: the worker consumes
            records.new()
            worker.check()
            if time.monotonic() > deadline:
                raise RuntimeError("the worker ran no warm-up task in 60 s")
            time.sleep(0.1)
        sampler = Sampler(db_url, schema, match)
        if args.vacuum_like_autovacuum:
            vacuumer = Vacuumer(db_url, schema, args.naptime)
        records.total, records.sent = 0, []
        log(
            f"{broker} {kind}: go ({args.rate:g}/s, {args.baseline:g}+{args.hold:g}"
            f"+{args.recovery:g} s)"
        )
        print(window_header(), flush=True)
        publisher.start()
        t0 = time.monotonic()
        cpu_prev, w_start, pub_prev = cpu_by_pid(), t0, 0
        waits: list[str] = []
        ends = [args.baseline, args.baseline + args.hold, total]
        while True:
            now = time.monotonic() - t0
            w_end = min(e for e in [*ends, w_start - t0 + args.window] if e > w_start - t0)
            if now >= w_end - 0.05 or now >= total:
                w = _window(
                    phase_of(w_start - t0, ends),
                    w_start - t0,
                    now,
                    records,
                    publisher,
                    sampler,
                    pressure,
                    vacuumer,
                    cpu_prev,
                    pub_prev,
                    waits,
                    match,
                )
                cpu_prev, pub_prev, waits = w.cpu_now, w.published, []
                result["windows"].append(w.as_dict())
                print_window(w)
                w_start = t0 + now
                if now >= total:
                    break
            if pressure is None and args.baseline <= now < ends[1]:
                pressure = (
                    Holder(db_url)
                    if kind == "xmin"
                    else Readers(db_url, _scan_sql(table, schema), args.readers)
                )
                log(
                    f"pressure on: {kind} (backends {pressure.pids})"
                    + (f", xid {pressure.xid}" if isinstance(pressure, Holder) else "")
                )
            if pressure is not None and now >= ends[1]:
                if isinstance(pressure, Readers) and pressure.errors:
                    result["notes"].append(f"reader error: {pressure.errors[0]}")
                pressure.close()
                pressure = None
                log("pressure off")
            worker.check()
            exclude = list(getattr(pressure, "pids", [])) + ([vacuumer.pid] if vacuumer else [])
            with contextlib.suppress(psycopg.Error):
                waits += sampler.waits(exclude)
            time.sleep(max(0.0, math.floor(now) + 1 - (time.monotonic() - t0)))
        published = publisher.final_count()
        drained = _drain(records, published, worker, args.drain_timeout)
        result.update(
            published=published,
            finished=records.total,
            unique=len(set(records.sent)),
            drain_seconds=drained,
            tables_end=sampler.tables(),
        )
        result["summary"] = summarize(result, args)
    except Exception as exc:
        result["failed"] = f"{type(exc).__name__}: {exc}"
        log(f"{broker} {kind} FAILED: {result['failed']}\n{tail(logfile)}")
    finally:
        for part in (pressure, vacuumer, sampler, publisher):
            if part is not None:
                part.close()
        if worker is not None:
            worker.kill()
        if place is not None:
            result["notes"] += place.cleanup()
        problems = log_problems(logfile)
        if problems:
            result["notes"].append(
                f"{len(problems)} warning/error log line(s): {problems[0][:200]}"
            )
        for f in (record, logfile):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    return result


def phase_of(t: float, ends: list[float]) -> str:
    return "baseline" if t < ends[0] else "pressure" if t < ends[1] else "recovery"


def _window(
    phase,
    start,
    end,
    records,
    publisher,
    sampler,
    pressure,
    vacuumer,
    cpu_prev,
    pub_prev,
    waits,
    match,
) -> Window:
    new = records.new()
    state = publisher.state()
    tables = sampler.tables()
    cpu_now = cpu_by_pid()
    dt = max(end - start, 1e-6)
    delta = {p: c - cpu_prev.get(p, 0.0) for p, c in cpu_now.items()}
    broker_pids = set(_broker_pids(sampler, match))
    reader_pids = set(getattr(pressure, "pids", []))
    scans = pressure.take() if isinstance(pressure, Readers) else []
    lat = sorted((s - t) * 1000 for t, s in new)
    return Window(
        phase=phase,
        start=start,
        end=end,
        offered=(state["count"] - pub_prev) / dt,
        done=len(new) / dt,
        p50=percentile_or_none(lat, 50),
        p99=percentile_or_none(lat, 99),
        latencies=lat,
        published=state["count"],
        backlog=max(0, state["count"] - records.total),  # the count is ≤ 0.05 s old
        lag=state.get("lag", 0.0),
        tables=tables,
        pg_cpu=sum(delta.values()) / dt,
        broker_cpu=sum(v for p, v in delta.items() if p in broker_pids) / dt,
        reader_cpu=sum(v for p, v in delta.items() if p in reader_pids) / dt,
        scan_ms=1000 * percentile(sorted(scans), 50) if scans else None,
        vacuums=[r[1] for r in vacuumer.take()] if vacuumer else [],
        truncates=sampler.truncates(),
        catalog=sampler.catalog(),
        waits=collections.Counter(waits).most_common(2),
        cpu_now=cpu_now,
    )


def _broker_pids(sampler: Sampler, match: str) -> list[int]:
    """The broker's client backends: its database, its schema named in their statements,
    none of this script's own sessions (their application_name starts with bench_)."""
    with contextlib.suppress(psycopg.Error):
        rows = sampler.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND query LIKE %s "
            "AND application_name NOT LIKE 'bench\\_%%'",
            (match,),
        ).fetchall()
        return [r[0] for r in rows]
    return []


def _drain(records: Records, published: int, worker: Worker, timeout: float) -> float | None:
    """Wait for the backlog to run; the seconds it took, or None at the timeout."""
    t0 = time.monotonic()
    while records.total < published:
        records.new()
        worker.check()
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(0.2)
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default=",".join(BROKERS), help="comma-separated (%(default)s)")
    p.add_argument("--pressure", default=",".join(KINDS), help="xmin, readers or both")
    p.add_argument("--rate", type=float, default=100.0, help="offered tasks/s (100)")
    p.add_argument("--baseline", type=float, default=60.0, help="seconds (60)")
    p.add_argument("--hold", type=float, default=240.0, help="pressure seconds (240)")
    p.add_argument("--recovery", type=float, default=90.0, help="seconds (90)")
    p.add_argument("--window", type=float, default=5.0, help="window seconds (5)")
    p.add_argument("--readers", type=int, default=4, help="reader sessions (4)")
    p.add_argument(
        "--vacuum-like-autovacuum",
        action="store_true",
        help="VACUUM/ANALYZE the broker's tables on autovacuum's thresholds, every naptime",
    )
    p.add_argument("--naptime", type=float, help="seconds between vacuum checks (server's)")
    p.add_argument("--drain-timeout", type=float, default=300.0, help="after recovery (300)")
    p.add_argument("--json", type=Path, help="write every window and summary as JSON")
    p.add_argument("--loglevel", default="WARNING", help="worker log level")
    p.add_argument(
        "--rev",
        default="HEAD",
        help="alkstore from this git revision (HEAD; extracted as run.py's --rev does); "
        "'worktree': the working tree as it is",
    )
    args = p.parse_args(argv)
    brokers = [b for b in args.brokers.split(",") if b]
    kinds = [k for k in args.pressure.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            p.error(f"unknown pressure {k!r} (one of {', '.join(KINDS)})")

    def _term(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in background
    print(machine_note(args), flush=True)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="alk-pressure-") as tmp:
            workdir = Path(tmp)
            (workdir / f"{TASKS_MODULE}.py").write_text(TASKS_SOURCE)
            args.rev_path = None
            if args.rev != "worktree":
                sha = subprocess.run(
                    ["git", "-C", str(ROOT), "rev-parse", "--short", args.rev],
                    check=True,
                    capture_output=True,
                ).stdout.decode()
                args.rev_path = checkout(sha.strip(), workdir / "rev")
                print(f"# kombu_alkstore as of {sha.strip()} ({args.rev})", flush=True)
            else:
                print("# kombu_alkstore: the working tree as it is", flush=True)
            for kind in kinds:
                for broker in brokers:
                    results.append(run_one(broker, kind, args, workdir))
                    if args.json:
                        args.json.write_text(json.dumps(results, indent=1, default=str))
    except KeyboardInterrupt:
        log("interrupted: everything started was cleaned up")
        return 130
    print()
    print(summary_markdown(results, args))
    return 1 if any("failed" in r for r in results) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
