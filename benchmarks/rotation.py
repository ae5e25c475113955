"""Does rotating, truncated storage bound a queue's dead rows under MVCC pressure? A
prototype, measured beside the table we have (issue 35's "dead tuples and table size
bounded", not met by claim floors).

    python benchmarks/rotation.py [--layouts plain,rotate] [--pressure xmin,readers]
        [--rate 500] [--baseline 30] [--hold 180] [--recovery 30] [--period 10]
        [--json FILE]

Not the broker: a queue of the same shape as alkstore's ``jobs`` (its columns, its claim
index ``(queue, priority DESC, run_at, id)``, its claim and ack), driven by plain psycopg
so that the storage is the only thing that differs:

plain
    one table; a claim is an UPDATE of the oldest due row (``FOR UPDATE SKIP LOCKED``),
    an ack a DELETE: two dead versions per job, which only VACUUM removes, and VACUUM
    cannot while the xmin horizon is pinned. (No claim floors: its claims walk the dead
    index entries, as the broker's did before them.)
rotate
    the same table ``PARTITION BY LIST (gen)`` into four generations; ``rotation.cur``
    names the one publishes go to. Every ``--period`` seconds a rotator locks the oldest
    generation (the next to become current: ``NOWAIT`` four times 10 ms apart, then
    waiting at most 50 ms, since a LOCK that waits queues every claim behind it; not at
    all while a transaction open for over a second holds a lock on it), copies its live
    rows into ``cur`` (ids kept: an ack finds a job by id in whichever generation holds
    it), TRUNCATEs it and makes it current, in one transaction. TRUNCATE frees a table's
    files at once, whatever the horizon, so the dead versions of a generation live at
    most three periods. A generation it cannot lock, or that holds more than 10,000 live
    rows (a backlog: copying it would rewrite it every rotation), is left until the next
    period, and ``cur`` goes on growing meanwhile.

Load: one publisher process at ``--rate`` jobs/s, open loop, one durable INSERT per
commit, its wall time in ``created_at``; two claimer processes, each claiming one job and
acking it (two transactions). Pressure, during the middle phase (the sessions of
``benchmarks/pressure.py``): ``xmin``, one session idle in transaction holding an XID;
``readers``, four REPEATABLE READ sessions, each one transaction, scanning ``jobs`` every
0.1 s. autovacuum's rules are applied by a side thread throughout (this machine's
PostgreSQL runs with autovacuum off).

Per 5 s window: jobs acked/s, p50/p99 pickup (publish → claim), backlog (published −
acked), dead tuples and total size of the jobs table(s) (``pg_stat_user_tables``, summed
over generations), rotations done / given up. Figures to read, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import queue as queue_mod
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from benchmarks.harness.brokers import PG_URL, drop_schema  # noqa: E402
from benchmarks.harness.pressure_load import (  # noqa: E402
    Holder,
    Readers,
    Sampler,
    Vacuumer,
    log,
)
from benchmarks.harness.session import percentile, percentile_or_none  # noqa: E402

GENERATIONS = 4
TRIES = 5  # lock attempts per rotation, 10 ms apart: NOWAIT, and the last one waits
MAX_COPY = 10_000  # live rows a rotation copies forward at most
LOCK_WAIT = "50ms"  # the last attempt's lock_timeout: claims queue behind it meanwhile
WINDOW = 5.0
BODY = b"x" * 600  # about a Celery message's size
COLUMNS = "queue, msg_id, body, priority, state, run_at, attempts, created_at"

PLAIN = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, msg_id TEXT, body BYTEA NOT NULL,
    priority SMALLINT DEFAULT 0 NOT NULL, state TEXT DEFAULT 'pending' NOT NULL,
    run_at DOUBLE PRECISION NOT NULL, attempts INTEGER DEFAULT 0 NOT NULL,
    created_at DOUBLE PRECISION NOT NULL);
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id);
"""

ROTATE = """
CREATE TABLE rotation (cur SMALLINT NOT NULL);
INSERT INTO rotation VALUES (0);
CREATE SEQUENCE jobs_id;
CREATE TABLE jobs (
    gen SMALLINT NOT NULL, id BIGINT NOT NULL DEFAULT nextval('jobs_id'),
    queue TEXT NOT NULL, msg_id TEXT, body BYTEA NOT NULL,
    priority SMALLINT DEFAULT 0 NOT NULL, state TEXT DEFAULT 'pending' NOT NULL,
    run_at DOUBLE PRECISION NOT NULL, attempts INTEGER DEFAULT 0 NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (id, gen)) PARTITION BY LIST (gen);
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id);
"""

STATEMENTS = {
    "plain": {
        "publish": "INSERT INTO jobs (queue, msg_id, body, run_at, created_at) "
        "VALUES ('q', %(msg_id)s, %(body)s, %(now)s, %(now)s)",
        "claim": "UPDATE jobs j SET state = 'processing', run_at = %(now)s + 30, "
        "attempts = j.attempts + 1 FROM (SELECT id FROM jobs WHERE queue = 'q' "
        "AND run_at <= %(now)s ORDER BY priority DESC, run_at, id LIMIT 1 "
        "FOR UPDATE SKIP LOCKED) c WHERE j.id = c.id RETURNING j.id, j.created_at",
        "ack": "DELETE FROM jobs WHERE id = %(id)s",
    },
    "rotate": {
        "publish": "INSERT INTO jobs (gen, queue, msg_id, body, run_at, created_at) "
        "SELECT cur, 'q', %(msg_id)s, %(body)s, %(now)s, %(now)s FROM rotation",
        "claim": "UPDATE jobs j SET state = 'processing', run_at = %(now)s + 30, "
        "attempts = j.attempts + 1 FROM (SELECT gen, id FROM jobs WHERE queue = 'q' "
        "AND run_at <= %(now)s ORDER BY priority DESC, run_at, id LIMIT 1 "
        "FOR UPDATE SKIP LOCKED) c WHERE j.id = c.id AND j.gen = c.gen "
        "RETURNING j.id, j.created_at",
        "ack": "DELETE FROM jobs WHERE id = %(id)s",
    },
}


def new_schema() -> tuple[str, str]:
    """A private schema, and a URL whose sessions find its tables first."""
    schema = f"rot_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    sep = "&" if "?" in PG_URL else "?"
    return schema, f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


def create(url: str, layout: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PLAIN if layout == "plain" else ROTATE)
        if layout == "rotate":
            for g in range(GENERATIONS):
                conn.execute(
                    sql.SQL("CREATE TABLE {} PARTITION OF jobs FOR VALUES IN ({})").format(
                        sql.Identifier(f"jobs_{g}"), sql.Literal(g)
                    )
                )


def publisher(url: str, layout: str, rate: float, seconds: float, published, go) -> None:
    stmt = STATEMENTS[layout]["publish"]
    with psycopg.connect(url, autocommit=True) as conn:
        go.wait()
        interval, n, t0 = 1.0 / rate, 0, time.monotonic()
        while n * interval < seconds:
            due = t0 + n * interval
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            conn.execute(stmt, {"msg_id": str(n), "body": BODY, "now": time.time()})
            n += 1
            published.value = n


def claimer(url: str, layout: str, acked, stop, out) -> None:
    claim, ack = STATEMENTS[layout]["claim"], STATEMENTS[layout]["ack"]
    batch: list[tuple[float, float, float]] = []  # (time, pickup s, claim s)
    last = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            t0 = time.perf_counter()
            row = conn.execute(claim, {"now": time.time()}).fetchone()
            took = time.perf_counter() - t0
            if row is None:
                time.sleep(0.002)
            else:
                now = time.time()
                batch.append((now, now - row[1], took))
                conn.execute(ack, {"id": row[0]})
                with acked.get_lock():
                    acked.value += 1
            if time.monotonic() - last > 0.5:
                out.put(batch)
                batch, last = [], time.monotonic()
    out.put(batch)


class Rotator:
    """Every ``period`` seconds, truncates the oldest generation after copying its live
    rows into the current one, and makes it current; see the module's doc."""

    def __init__(self, url: str, period: float) -> None:
        self.conn = psycopg.connect(url, autocommit=True, application_name="bench_rotator")
        self.period, self.stop = period, threading.Event()
        self.done = self.skipped = self.held = self.backlogged = self.moved = 0
        self.lock_ms: list[float] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.period):
            cur = self.conn.execute("SELECT cur FROM rotation").fetchone()[0]
            nxt = (cur + 1) % GENERATIONS
            t0 = time.perf_counter()
            if self._held(f"jobs_{nxt}"):
                self.held += 1
                continue
            for attempt in range(TRIES):
                try:
                    moved = self._advance(cur, nxt, wait=attempt == TRIES - 1)
                    break
                except psycopg.errors.LockNotAvailable:
                    time.sleep(0.01)
            else:
                self.skipped += 1
                continue
            if moved is None:
                self.backlogged += 1
            else:
                self.done += 1
                self.moved += moved
            self.lock_ms.append((time.perf_counter() - t0) * 1000)

    def _held(self, table: str) -> bool:
        """Whether a transaction open for over a second holds a lock on ``table``: a
        REPEATABLE READ reader that scanned ``jobs`` holds one on every generation until
        it ends, and a LOCK would only queue the claims behind it for nothing."""
        return self.conn.execute(
            "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.relation = %s::regclass AND l.granted AND l.pid <> pg_backend_pid() "
            "AND a.xact_start < now() - interval '1 second')",
            (table,),
        ).fetchone()[0]

    def _advance(self, cur: int, nxt: int, wait: bool) -> int | None:
        """In one transaction holding generation ``nxt``'s ACCESS EXCLUSIVE lock (NOWAIT,
        or waiting ``LOCK_WAIT``: a LOCK that waits queues every claim behind it): copy
        its live rows into ``cur``, TRUNCATE it and make it current; returns the rows
        moved. Nothing is done (None) while it holds more than ``MAX_COPY`` live rows: a
        backlog is not rewritten every rotation, ``cur`` goes on growing instead."""
        table = sql.Identifier(f"jobs_{nxt}")
        with self.conn.transaction():
            if wait:
                self.conn.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
            self.conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE{}").format(
                    table, sql.SQL("" if wait else " NOWAIT")
                )
            )
            live = self.conn.execute(
                sql.SQL("SELECT count(*) FROM (SELECT FROM {} LIMIT %s) l").format(table),
                (MAX_COPY + 1,),
            ).fetchone()[0]
            if live > MAX_COPY:
                raise psycopg.Rollback()  # leaves the block, rolled back
            moved = self.conn.execute(
                sql.SQL("INSERT INTO jobs (gen, id, {c}) SELECT %s, id, {c} FROM {t}").format(
                    c=sql.SQL(COLUMNS), t=table
                ),
                (cur,),
            ).rowcount
            self.conn.execute(sql.SQL("TRUNCATE {}").format(table))
            self.conn.execute("UPDATE rotation SET cur = %s", (nxt,))
            return moved
        return None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.conn.close()


def run_one(layout: str, kind: str, args: argparse.Namespace) -> dict:
    schema, base = new_schema()
    ctx = mp.get_context("spawn")
    published, acked = ctx.Value("q", 0), ctx.Value("q", 0)
    go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs, closers, windows = [], [], []
    phases = [args.baseline, args.baseline + args.hold, args.baseline + args.hold + args.recovery]
    try:
        create(base, layout)
        procs.append(
            ctx.Process(
                target=publisher,
                args=(base, layout, args.rate, phases[-1], published, go),
                daemon=True,
            )
        )
        procs += [
            ctx.Process(target=claimer, args=(base, layout, acked, stop, out), daemon=True)
            for _ in range(2)
        ]
        for p in procs:
            p.start()
        sampler, vacuumer = Sampler(PG_URL, schema, "%jobs%"), Vacuumer(PG_URL, schema)
        closers += [sampler.close, vacuumer.close]
        rotator = Rotator(base, args.period) if layout == "rotate" else None
        if rotator:
            closers.append(rotator.close)
        time.sleep(1.0)
        go.set()
        t0, pressure, records = time.monotonic(), None, []
        rot_seen, acked_seen = (0, 0), 0
        while (t := time.monotonic() - t0) < phases[-1]:
            time.sleep(WINDOW - (t % WINDOW))
            t = time.monotonic() - t0
            phase = "baseline" if t <= phases[0] else "pressure" if t <= phases[1] else "recovery"
            if phase == "pressure" and pressure is None:
                pressure = (
                    Holder(PG_URL)
                    if kind == "xmin"
                    else Readers(base, "SELECT count(*), min(id), max(id) FROM jobs")
                )
                closers.append(pressure.close)
            elif phase == "recovery" and pressure:
                pressure.close()
                pressure = False
            with contextlib.suppress(queue_mod.Empty):
                while True:
                    records += out.get_nowait()
            cut = time.time() - WINDOW
            recent = [r for r in records if r[0] >= cut]
            records = recent
            tables = sampler.tables()
            jobs = [v for k, v in tables.items() if k.startswith("jobs")]
            rot = (
                (rotator.done, rotator.skipped + rotator.held + rotator.backlogged)
                if rotator
                else (0, 0)
            )
            done = acked.value
            windows.append(
                {
                    "t": round(t, 1),
                    "phase": phase,
                    "acked_per_s": round((done - acked_seen) / WINDOW, 1),
                    "p50_ms": _ms(percentile_or_none([r[1] for r in recent], 50)),
                    "p99_ms": _ms(percentile_or_none([r[1] for r in recent], 99)),
                    "claim_ms": _ms(percentile_or_none([r[2] for r in recent], 50)),
                    "backlog": published.value - done,
                    "dead": sum(v[0] for v in jobs),
                    "size_mb": round(sum(v[2] for v in jobs) / 2**20, 1),
                    "rotations": rot[0] - rot_seen[0],
                    "given_up": rot[1] - rot_seen[1],
                }
            )
            rot_seen, acked_seen = rot, done
            w = windows[-1]
            log(
                f"{layout}/{kind} {w['t']:6.1f}s {phase:8} {w['acked_per_s']:6.1f}/s "
                f"p50 {w['p50_ms']} p99 {w['p99_ms']} ms claim {w['claim_ms']} ms "
                f"backlog {w['backlog']} dead {w['dead']} {w['size_mb']} MB "
                f"rot {w['rotations']}/{w['given_up']}"
            )
        return {
            "layout": layout,
            "pressure": kind,
            "rate": args.rate,
            "period": args.period,
            "windows": windows,
            "moved": rotator.moved if rotator else 0,
            "held": rotator.held if rotator else 0,
            "backlogged": rotator.backlogged if rotator else 0,
            "lock_ms_max": round(max(rotator.lock_ms), 1) if rotator and rotator.lock_ms else None,
        }
    finally:
        stop.set()
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        # A claimer exits only once its last batch is read from the queue.
        deadline = time.monotonic() + 10
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            with contextlib.suppress(queue_mod.Empty):
                out.get(timeout=0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        drop_schema(schema)


def micro(layout: str, cycles: int) -> dict:
    """One connection, no pressure, no rotation: the median µs of a publish, a claim and
    an ack, ``cycles`` each, interleaved (the price of the generations on the hot path:
    tuple routing, a claim over four index heads, an ack probing four primary keys)."""
    stmts, took = STATEMENTS[layout], {"publish": [], "claim": [], "ack": []}
    schema, base = new_schema()
    try:
        create(base, layout)
        with psycopg.connect(base, autocommit=True) as conn:
            for n in range(cycles):
                t0 = time.perf_counter()
                conn.execute(stmts["publish"], {"msg_id": str(n), "body": BODY, "now": time.time()})
                t1 = time.perf_counter()
                row = conn.execute(stmts["claim"], {"now": time.time()}).fetchone()
                t2 = time.perf_counter()
                conn.execute(stmts["ack"], {"id": row[0]})
                t3 = time.perf_counter()
                for name, dt in (("publish", t1 - t0), ("claim", t2 - t1), ("ack", t3 - t2)):
                    took[name].append(dt * 1e6)
    finally:
        drop_schema(schema)
    return {name: round(percentile(v, 50), 1) for name, v in took.items()}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def summary(result: dict) -> dict:
    """Per phase: mean acked/s, worst window p99, max backlog, dead rows and size at the
    phase's end and their maximum."""
    out = {}
    for phase in ("baseline", "pressure", "recovery"):
        ws = [w for w in result["windows"] if w["phase"] == phase]
        if not ws:
            continue
        p99s = [w["p99_ms"] for w in ws if w["p99_ms"] is not None]
        out[phase] = {
            "acked_per_s": round(sum(w["acked_per_s"] for w in ws) / len(ws), 1),
            "p99_ms_worst": max(p99s) if p99s else None,
            "backlog_max": max(w["backlog"] for w in ws),
            "dead_max": max(w["dead"] for w in ws),
            "size_mb_max": max(w["size_mb"] for w in ws),
            "size_mb_end": ws[-1]["size_mb"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layouts", default="plain,rotate")
    ap.add_argument("--pressure", default="xmin,readers")
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--baseline", type=float, default=30.0)
    ap.add_argument("--hold", type=float, default=180.0)
    ap.add_argument("--recovery", type=float, default=30.0)
    ap.add_argument("--period", type=float, default=10.0, help="seconds between rotations")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--micro", type=int, default=0, help="only time N publish/claim/ack cycles per layout"
    )
    args = ap.parse_args(argv)
    # SIGTERM as Ctrl-C: the finally blocks stop the processes and drop the schema.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.micro:
        print("| layout | publish µs | claim µs | ack µs |\n|---|---:|---:|---:|")
        for _ in range(3):
            for layout in args.layouts.split(","):
                m = micro(layout, args.micro)
                print(f"| {layout} | {m['publish']} | {m['claim']} | {m['ack']} |")
        return 0
    results = []
    for kind in args.pressure.split(","):
        for layout in args.layouts.split(","):
            result = run_one(layout, kind, args)
            result["summary"] = summary(result)
            results.append(result)
            print(json.dumps({k: result[k] for k in ("layout", "pressure", "summary")}))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print()
    print(
        "| layout | pressure | phase | acked/s | worst p99 ms | max backlog | max dead | max MB |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in results:
        for phase, s in r["summary"].items():
            print(
                f"| {r['layout']} | {r['pressure']} | {phase} | {s['acked_per_s']} | "
                f"{s['p99_ms_worst']} | {s['backlog_max']} | {s['dead_max']} | {s['size_mb_max']} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
