"""One measured session: a broker place, a worker with one pool, the four measurements;
and the alkstore-PostgreSQL scaling sessions (10 k / 1 M pending rows, 1 M dead rows)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .brokers import PG_URL, Place, base_name, make_place
from .procs import Client, PySpy, Worker, log_problems, tail

SEND_INTERVAL = 0.020  # seconds between latency probes
STALL = 45.0  # seconds without progress before a wait gives up


@dataclass
class Config:
    tasks: int = 5000  # (a) publish and (b) drain backlog
    samples: int = 300  # (c) latency probes, SEND_INTERVAL apart
    idle: float = 10.0  # (d) idle window, seconds
    #: alkstore-postgresql's idle window: long enough to see its 30 s sweep fairly.
    idle_pg: float = 60.0
    settle: float = 3.0  # quiet time before the idle window
    pause: float = 1.0  # after the drain, before the latency probes (the worker goes idle)
    scale_small: int = 10_000  # (e) pending rows, the reference
    scale_large: int = 1_000_000  # (e) pending rows, the large case
    scale_dead: int = 1_000_000  # (e) dead rows next to scale_small pending rows
    scale_tasks: int = 5000  # (e) tasks timed in each scaling session
    loglevel: str = "WARNING"
    profile_dir: Path | None = None  # py-spy raw profiles of the alkstore sessions
    nosync_options: dict | None = None
    publish_only: bool = False  # (a) only: no worker, no scaling
    revs: dict[str, Path] = field(default_factory=dict)  # rev → checkout path
    pgbench_seconds: float = 10.0  # each pgbench run (1 client, 4 clients) per repetition
    multi: bool = True  # (a') 4 concurrent publishers after (a)


@dataclass
class Outcome:
    """What one session measured: metric → value, plus notes."""

    broker: str
    pool: str
    rep: int
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: bool = False


_T0 = time.monotonic()


def log(msg: str) -> None:
    import sys

    print(f"{time.monotonic() - _T0:7.1f}s {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- records
def read_records(path: Path, kind: str) -> list[tuple[float, float]]:
    if not path.exists():
        return []
    out = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3 and parts[0] == kind:
                out.append((float(parts[1]), float(parts[2])))
    return out


def wait_records(path: Path, kind: str, n: int, worker: Worker, what: str):
    """Wait until ``n`` records of ``kind`` exist; fail on a dead worker or a stall."""
    seen, last_progress = -1, time.monotonic()
    while True:
        records = read_records(path, kind)
        if len(records) >= n:
            return records
        if len(records) != seen:
            seen, last_progress = len(records), time.monotonic()
        worker.check()
        if time.monotonic() - last_progress > STALL:
            raise RuntimeError(f"{what}: stalled at {len(records)} of {n} tasks for {STALL:.0f}s")
        time.sleep(0.05)


def drain_rate(records: list[tuple[float, float]], n: int) -> tuple[float, float]:
    """Tasks/s over the first ``n`` tasks to finish: first start → n-th end; and the span."""
    ends = sorted(e for _, e in records)[:n]
    first = min(s for s, _ in records)
    span = ends[-1] - first
    return len(ends) / span, span


def percentile(values: list[float], p: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def percentile_or_none(values: list[float], p: int) -> float | None:
    """:func:`percentile`, or None for no values (a window nothing finished in)."""
    return percentile(values, p) if values else None


def sql_count(path: Path) -> tuple[float, dict[str, int]]:
    """The worker's own statement count and its breakdown by statement (written by the
    tasks module 4 times a second)."""
    state = json.loads(path.read_text())
    return float(state["count"]), state["kinds"]


def kinds_delta(before: dict[str, int], after: dict[str, int]) -> str:
    diff = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    top = sorted(diff.items(), key=lambda kv: -kv[1])[:4]
    return "; ".join(f"{n}× `{_short(k)}`" for k, n in top)


def _short(kind: str) -> str:
    """The first words of a statement, and the queue it was for (if any)."""
    head, _, queue = kind.partition(" [")
    return head[:50] + (f" [{queue}" if queue else "")


class StatStatements:
    """``pg_stat_statements`` calls of statements naming one schema, when the view works."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.conn = psycopg.connect(PG_URL, autocommit=True)
        try:
            self.read()
        except psycopg.Error:
            self.conn.close()
            raise

    def read(self) -> int:
        row = self.conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
            (f"%{self.schema}%",),
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self.conn.close()


_PSS_REASON: list[str] = []


def stat_statements(schema: str) -> StatStatements | None:
    """The counter, or None (and the reason kept once for the notes)."""
    try:
        return StatStatements(schema)
    except psycopg.Error as exc:
        if not _PSS_REASON:
            _PSS_REASON.append(str(exc).strip().splitlines()[0])
        return None


# ---------------------------------------------------------------------------- sessions
def session_env(place: Place, record: Path, counted: Path | None, workdir: Path, cfg: Config):
    """(worker env, client env) for a place."""
    rev = place.broker.split("@", 1)[1] if "@" in place.broker else None
    paths = [str(cfg.revs[rev])] if rev else []
    paths += [str(workdir), os.environ.get("PYTHONPATH", "")]
    common = dict(
        os.environ,
        BENCH_RECORD=str(record),
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
    )
    common.pop("BENCH_COUNT_SQL", None)
    worker_env = dict(
        common, BENCH_BROKER=place.worker_url, BENCH_OPTIONS=json.dumps(place.options)
    )
    if counted is not None:
        worker_env["BENCH_COUNT_SQL"] = str(counted)
    client_options = place.options if place.client_options is None else place.client_options
    client_env = dict(
        common, BENCH_BROKER=place.client_url, BENCH_OPTIONS=json.dumps(client_options)
    )
    return worker_env, client_env


def _failed(out: Outcome, label: str, exc: Exception, logfile: Path) -> None:
    """Mark a session failed: the error first in its notes, and logged with the log's tail."""
    out.failed = True
    out.notes.insert(0, f"FAILED: {type(exc).__name__}: {exc}")
    log(f"[{label}] FAILED: {type(exc).__name__}: {exc}\n{tail(logfile)}")


def run_session(broker: str, pool: str, rep: int, cfg: Config, workdir: Path) -> Outcome:
    """Publish, drain, latency and idle cost of one broker with one worker pool."""
    out = Outcome(broker, pool, rep)
    tag = f"{broker.replace('@', '-')}-{pool}-r{rep}-{uuid.uuid4().hex[:6]}"
    record, logfile = workdir / f"{tag}.record", workdir / f"{tag}.log"
    counted = workdir / f"{tag}.sql"
    client_counted = workdir / f"{tag}.client.sql"
    worker: Worker | None = None
    client: Client | None = None
    spy: PySpy | None = None
    pss: StatStatements | None = None
    place: Place | None = None
    profile = cfg.profile_dir is not None and base_name(broker).startswith("alkstore")
    try:
        place = make_place(broker, workdir, cfg.nosync_options)
        worker_env, client_env = session_env(place, record, counted, workdir, cfg)

        # (a) publish: the client connects and declares first, then times N apply_async.
        log(f"[r{rep} {broker} {pool}] publish {cfg.tasks}")
        client_env["BENCH_COUNT_SQL"] = str(client_counted)
        client = Client(workdir, client_env, logfile)
        if profile:
            spy = PySpy(client.proc.pid, cfg.profile_dir / f"{tag}-publish.txt")
        got = client.call(["publish", str(cfg.tasks)], 120 + cfg.tasks / 20)
        out.values["publish"] = cfg.tasks / got["seconds"]
        if spy is not None:
            spy.stop()
            spy = None
        if client_counted.exists():  # the warm-up (connect, setup, declare) included
            time.sleep(0.3)
            n, kinds = sql_count(client_counted)
            out.notes.append(
                f"publish: {n / cfg.tasks:.2f} statements/task; {kinds_delta({}, kinds)}"
            )
        if cfg.multi:  # (a') the same tasks from 4 publishing processes at once
            from .publishers import PUBLISHERS, concurrent_publish

            log(f"[r{rep} {broker} {pool}] publish {cfg.tasks} from {PUBLISHERS} processes")
            client_env.pop("BENCH_COUNT_SQL", None)
            out.values["publish4"] = concurrent_publish(client, client_env, workdir, logfile, cfg)
        if "drain" not in place.phases or cfg.publish_only:
            return out

        # (b) drain: a worker started on the backlog; first task start → last task end.
        worker = Worker(workdir, worker_env, logfile, pool, cfg.loglevel)
        if profile:
            spy = PySpy(worker.pid, cfg.profile_dir / f"{tag}-drain.txt")
        done = wait_records(record, "drain", cfg.tasks, worker, "drain")
        if spy is not None:
            spy.stop()
            spy = None
        out.values["drain"], span = drain_rate(done, cfg.tasks)
        if counted.exists():  # start-up included: a few setup/declare statements
            time.sleep(0.3)  # the counter file is rewritten 4 times a second
            n, kinds = sql_count(counted)
            out.notes.append(
                f"drain: {n / cfg.tasks:.2f} statements/task; {kinds_delta({}, kinds)}"
            )
        first = min(s for s, _ in done)
        out.notes.append(f"worker start → first task {first - worker.started:.2f}s")

        # (c) latency: the idle worker, probes 20 ms apart carrying their send time.
        time.sleep(cfg.pause)
        before = sql_count(counted) if counted.exists() else None
        if profile:
            spy = PySpy(worker.pid, cfg.profile_dir / f"{tag}-latency.txt")
        got = client.call(
            ["probe", str(cfg.samples), str(SEND_INTERVAL)], 120 + cfg.samples * SEND_INTERVAL * 2
        )
        client.close()
        client = None
        probes = wait_records(record, "probe", cfg.samples, worker, "latency")
        if spy is not None:
            spy.stop()
            spy = None
        if before is not None:  # a few idle safety-net polls may be included
            time.sleep(0.3)
            after = sql_count(counted)
            out.notes.append(
                f"latency: {(after[0] - before[0]) / cfg.samples:.2f} statements/probe; "
                + kinds_delta(before[1], after[1])
            )
        lat = [(start - sent) * 1000 for sent, start in probes]
        for p in (50, 95, 99):
            out.values[f"p{p}"] = percentile(lat, p)
        if got.get("late_max", 0) > SEND_INTERVAL:
            out.notes.append(f"the probe sender fell {got['late_max'] * 1000:.0f} ms behind")

        # (d) idle cost: CPU of the worker's process group; its own statement count.
        time.sleep(cfg.settle)
        if place.schema:
            pss = stat_statements(place.schema)
        c0, t0 = worker.cpu_seconds(), time.monotonic()
        s0 = sql_count(counted) if counted.exists() else None
        p0 = pss.read() if pss else None
        time.sleep(cfg.idle_pg if base_name(broker) == "alkstore-postgresql" else cfg.idle)
        worker.check()
        dt = time.monotonic() - t0
        out.values["idle_cpu"] = 100 * (worker.cpu_seconds() - c0) / dt
        if s0 is not None:
            s1 = sql_count(counted)
            out.values["idle_stmts"] = (s1[0] - s0[0]) / dt
            if s1[0] > s0[0]:
                out.notes.append(f"idle {dt:.0f}s: {kinds_delta(s0[1], s1[1])}")
        if pss is not None and p0 is not None:
            out.values["idle_stmts_pss"] = (pss.read() - p0) / dt
        worker.kill()
        worker = None
        for kind, sent in (("drain", cfg.tasks), ("probe", cfg.samples)):
            extra = len(read_records(record, kind)) - sent
            if extra:
                out.notes.append(f"{extra} {kind} task(s) ran more than once")
    except Exception as exc:  # one session failing: report it, go on with the next
        _failed(out, f"r{rep} {broker} {pool}", exc, logfile)
    finally:
        if client is not None:
            client.close()
        if spy is not None:
            spy.stop()
        if worker is not None:
            worker.kill()
        if pss is not None:
            pss.close()
        if place is not None:
            out.notes += place.cleanup()
        out.notes += _problems(logfile)
        for f in (record, counted, client_counted, logfile):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    return out


def _problems(logfile: Path) -> list[str]:
    problems = log_problems(logfile)
    if not problems:
        return []
    return [f"{len(problems)} warning/error line(s) in the worker log, e.g. {problems[0][:200]}"]


# ---------------------------------------------------------------------------- scaling
SCALING = ("pending-small", "pending-large", "dead-large")


def scale_label(variant: str, cfg: Config) -> str:
    if variant == "pending-small":
        return f"{_count(cfg.scale_small)} pending"
    if variant == "pending-large":
        return f"{_count(cfg.scale_large)} pending"
    return f"{_count(cfg.scale_small)} pending + {_count(cfg.scale_dead)} dead"


def _count(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000} M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000} k"
    return str(n)


def _columns(conn: psycopg.Connection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    if not rows:
        raise RuntimeError(f"table {schema}.{table} not found")
    return [r[0] for r in rows]


def fill(schema: str, pending: int, dead: int) -> float:
    """Copy the one real Celery message in ``jobs`` until ``pending`` rows are pending, and
    put ``dead`` copies in ``dead`` (same queue); each copy gets its own task id. Seconds."""
    t0 = time.monotonic()
    q = f'"{schema}"'
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # filling only; not what is measured
        template = conn.execute(
            f"SELECT id, msg_id FROM {q}.jobs WHERE queue = 'celery' ORDER BY id LIMIT 1"
        ).fetchone()
        if template is None:
            raise RuntimeError("no template message in the jobs table")
        tid, msg_id = template
        body = (
            "convert_to(replace(convert_from(t.body, 'UTF8'), t.msg_id, s.u), 'UTF8')"
            if msg_id
            else "t.body"
        )
        jobs = [c for c in _columns(conn, schema, "jobs") if c != "id"]
        over = {"msg_id": "s.u", "body": body}
        if pending > 1:
            conn.execute(
                f"INSERT INTO {q}.jobs ({', '.join(jobs)}) "
                f"SELECT {', '.join(over.get(c, 't.' + c) for c in jobs)} "
                f"FROM (SELECT gen_random_uuid()::text AS u FROM generate_series(1, %s)) s "
                f"CROSS JOIN {q}.jobs t WHERE t.id = %s",
                (pending - 1, tid),
            )
        if dead:
            cols = _columns(conn, schema, "dead")
            over = {
                "id": "-s.g",  # never collides with a job id
                "msg_id": "s.u",
                "body": body,
                "died_at": "extract(epoch FROM now())::float8",
                "last_error": "'benchmark filler'",
                "attempts": "t.max_attempts",
            }
            conn.execute(
                f"INSERT INTO {q}.dead ({', '.join(cols)}) "
                f"SELECT {', '.join(over.get(c, 't.' + c) for c in cols)} "
                f"FROM (SELECT g, gen_random_uuid()::text AS u FROM generate_series(1, %s) g) s "
                f"CROSS JOIN {q}.jobs t WHERE t.id = %s",
                (dead, tid),
            )
        # As autovacuum would leave a table that has been this size for a while.
        conn.execute(f"VACUUM ANALYZE {q}.jobs")
        if dead:
            conn.execute(f"VACUUM ANALYZE {q}.dead")
        # Write the fill's dirty pages out now, not during the timed drain.
        with contextlib.suppress(psycopg.Error):
            conn.execute("CHECKPOINT")
    return time.monotonic() - t0


def run_scaling(
    variant: str, rep: int, cfg: Config, workdir: Path, broker: str = "alkstore-postgresql"
) -> Outcome:
    """Drain rate of alkstore-postgresql (or ``alkstore-postgresql@REV``; prefork 2) over
    ``scale_tasks`` tasks of a table filled server-side to the variant's size."""
    suffix = f" @{broker.split('@', 1)[1]}" if "@" in broker else ""
    out = Outcome(f"scale: {scale_label(variant, cfg)}{suffix}", "prefork", rep)
    tag = f"scale-{variant}{suffix.replace(' @', '-')}-r{rep}-{uuid.uuid4().hex[:6]}"
    record, logfile = workdir / f"{tag}.record", workdir / f"{tag}.log"
    worker: Worker | None = None
    place: Place | None = None
    pending = cfg.scale_large if variant == "pending-large" else cfg.scale_small
    dead = cfg.scale_dead if variant == "dead-large" else 0
    try:
        place = make_place(broker, workdir)
        worker_env, client_env = session_env(place, record, None, workdir, cfg)
        client = Client(workdir, client_env, logfile)
        try:
            client.call(["publish", "1", "--no-warmup"], 120)
        finally:
            client.close()
        log(f"[r{rep} scale {variant}] filling {pending} pending, {dead} dead rows")
        seconds = fill(place.schema, pending, dead)
        out.notes.append(f"filled in {seconds:.1f}s")
        n = min(cfg.scale_tasks, pending)
        worker = Worker(workdir, worker_env, logfile, "prefork", cfg.loglevel)
        done = wait_records(record, "drain", n, worker, f"scale {variant}")
        out.values["drain"], _ = drain_rate(done, n)
    except Exception as exc:
        _failed(out, f"r{rep} scale {variant}", exc, logfile)
    finally:
        if worker is not None:
            worker.kill()
        if place is not None:
            out.notes += place.cleanup()
        out.notes += _problems(logfile)
        for f in (record, logfile):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    return out
