"""Soak with faults: Celery workers consume tasks while a chaos loop breaks things.

    python benchmarks/soak.py [--engine pg|sqlite|both] [--tasks M] [--workers N]
                              [--duration S] [--short] [--json PATH] [--seed N]

For each engine, ``N`` ``celery worker`` subprocesses (prefork, ``-c 2``) of the test app
``tests/apps/proj.py`` consume ``M`` ``mark`` tasks with ``task_acks_late`` and
``task_reject_on_worker_lost`` on. A publisher subprocess sends the tasks at a steady rate
over most of ``S`` seconds, while a chaos loop injects, at random moments:

kill_worker
    SIGKILL to a worker's whole process group (main process and pool children, in the
    middle of claims, acks and heartbeats); the worker is restarted a moment later.
kill_child
    SIGKILL to one pool child (the task it runs is lost: the worker rejects it back).
terminate_backends (PostgreSQL)
    ``pg_terminate_backend`` on every client backend (workers, publisher, LISTEN sockets).
restart_cluster (PostgreSQL)
    stop the private cluster (``pg_ctl stop -m fast``), wait, start it again.
crash_cluster (PostgreSQL)
    the same with ``-m immediate``: a server crash, with crash recovery at start. Claims,
    acks and heartbeats commit asynchronously (``synchronous_commit=off``), so the last
    fraction of a second of them may be undone: those messages are delivered again.
kill_publisher
    SIGKILL to the publisher mid-send; it restarts and resends what it had not confirmed.

PostgreSQL runs in a private throwaway cluster (``initdb`` on a free loopback port, see
``tests/private_pg.py``), never the shared server; SQLite in a fresh WAL file. Everything is
loopback only and bounded: the chaos stops after ``S`` seconds (or, when a kind has not been
injected yet, once every kind has been, within another ``S`` or 30 s), the settle phase after a cap.

Proof, from the tasks' own records (each run appends one line to a file with ``O_APPEND``,
never to the broker): every task ran at least once or sits in the dead letters; **lost**
(neither) must be 0. **Duplicates** are extra runs: *redelivered* (the same publish ran
twice: a claim lost after the task ran, before its ack landed) and *republished* (the
publisher was killed after a send committed but before it was confirmed, and sent again).
A **dead letter** is explained only if its error is ``attempts exhausted`` and at least
``max_attempts`` claim-losing faults (every kind but ``kill_publisher``) happened between
its publish and its death: each attempt needs a fault of its own to be lost. Explained dead
letters are then requeued and must run. ``--short`` (CI) runs both engines in under two
minutes. Exit status 1 if anything is lost or a dead letter is unexplained.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.procs import proc_stats  # noqa: E402

TASK = "tests.apps.proj.mark"
SCHEMA = "soak"
QUEUE = "celery"
#: Fault kinds that can lose a claim (and so eat one delivery attempt).
CLAIM_LOSING = (
    "kill_worker",
    "kill_child",
    "terminate_backends",
    "restart_cluster",
    "crash_cluster",
)
#: Faults that take the server down (at most one per ``Settings.restart_gap`` seconds).
RESTARTS = ("restart_cluster", "crash_cluster")


@dataclass
class Settings:
    engine: str
    tasks: int
    workers: int
    duration: float
    seed: int
    concurrency: int = 2
    task_sleep: float = 0.1
    visibility_timeout: float = 6.0
    max_attempts: int = 3
    backoff_base: float = 0.5
    settle_cap: float = 120.0
    fault_gap: tuple[float, float] = (1.0, 4.0)
    restart_gap: float = 12.0
    keep: bool = False
    loglevel: str = "WARNING"


@dataclass
class Report:
    engine: str
    tasks: int
    workers: int
    duration: float
    faults: dict[str, int] = field(default_factory=dict)
    backends_terminated: int = 0
    ran: int = 0
    lost: int = 0
    lost_keys: list[int] = field(default_factory=list)
    duplicates: int = 0
    redelivered: int = 0
    republished: int = 0
    #: Redeliveries by the kind of the last claim-losing fault before the first run.
    duplicate_causes: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    dead_explained: int = 0
    dead_unexplained: list[dict] = field(default_factory=list)
    dead_never_ran: int = 0
    dead_requeued_ran: int = 0
    dead_detail: list[dict] = field(default_factory=list)
    leftover_rows: int = 0
    leftover_detail: list[dict] = field(default_factory=list)
    unexpected_worker_exits: int = 0
    #: Exit code and log tail of each worker that exited on its own.
    crashes: list[dict] = field(default_factory=list)
    worker_log_tracebacks: int = 0
    lost_claim_warnings: int = 0
    refused_ack_warnings: int = 0
    consumer_restart_storms: int = 0
    publish_retries: int = 0
    integrity: str = "n/a"
    settle_seconds: float = 0.0
    #: (epoch seconds, fault kind) of every fault injected.
    events: list[tuple[float, str]] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and not self.dead_unexplained


# ------------------------------------------------------------------------------ publisher
def publisher_main() -> int:
    """The publisher subprocess: send every task not yet confirmed, at a steady rate.

    Each confirmed send appends its key to ``SOAK_CONFIRMED``. A key is ``<i>.<gen>``: the
    generation tells a resend after a publisher kill (a republish) from a redelivery.
    """
    from tests.apps import proj

    confirmed_path = os.environ["SOAK_CONFIRMED"]
    total = int(os.environ["SOAK_TASKS"])
    rate = float(os.environ["SOAK_RATE"])
    gen = int(os.environ["SOAK_GEN"])
    sleep_max = float(os.environ["SOAK_TASK_SLEEP"])
    rnd = random.Random(int(os.environ["SOAK_SEED"]) + gen)
    done = set()
    if os.path.exists(confirmed_path):
        done = {int(line.split(".")[0]) for line in Path(confirmed_path).read_text().split()}
    todo = [i for i in range(total) if i not in done]
    start = time.monotonic()
    retries = 0
    for n, i in enumerate(todo):
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        key = f"{i}.{gen}"
        while True:
            try:
                proj.app.send_task(
                    TASK,
                    (key, round(rnd.uniform(0, sleep_max), 3)),
                    retry=True,
                    retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5},
                )
                break
            except Exception as exc:  # the broker is being restarted: try again
                retries += 1
                print(f"publish {key} failed ({exc!r}); retrying", file=sys.stderr, flush=True)
                time.sleep(0.3)
        fd = os.open(confirmed_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key}\n".encode())
        finally:
            os.close(fd)
    print(f"publisher done: {len(todo)} sent, {retries} retries", file=sys.stderr, flush=True)
    return 0


# ---------------------------------------------------------------------------- processes
def _children(pid: int) -> list[int]:
    return [child for child, fields in proc_stats() if int(fields[1]) == pid]  # 4: ppid


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


class Soak:
    def __init__(self, s: Settings, workdir: Path) -> None:
        self.s = s
        self.dir = workdir
        self.rnd = random.Random(s.seed)
        self.record = workdir / "record.tsv"
        self.confirmed = workdir / "confirmed.txt"
        self.events: list[tuple[float, str]] = []
        self.report = Report(s.engine, s.tasks, s.workers, s.duration)
        self.cluster = None
        self.url = ""
        self.workers: list[subprocess.Popen | None] = [None] * s.workers
        self.worker_gen = [0] * s.workers
        self.restart_at: dict[int, float] = {}
        self.started_at: dict[int, float] = {}
        self.publisher: subprocess.Popen | None = None
        self.publisher_gen = 0
        self.publisher_restart_at: float | None = None
        self.publisher_done = False
        self.store = None
        self.options = {
            "schema": SCHEMA,
            "visibility_timeout": s.visibility_timeout,
            "max_attempts": s.max_attempts,
            "backoff_base": s.backoff_base,
            "polling_interval": 1.0,
        }

    # ----------------------------------------------------------------- environment
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            ALKSTORE_TEST_BROKER=f"alkstore+{self.url}",
            ALKSTORE_TEST_SCHEMA=SCHEMA,
            ALKSTORE_TEST_RECORD=str(self.record),
            ALKSTORE_TEST_OPTIONS=json.dumps(self.options),
            ALKSTORE_TEST_ACKS_LATE="1",
            PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        )
        env.update(extra)
        return env

    def open_store(self):
        from kombu_alkstore.store import open_store

        return open_store(
            self.url,
            schema=SCHEMA,
            **{k: v for k, v in self.options.items() if k not in ("schema", "polling_interval")},
        )

    def setup(self) -> None:
        if self.s.engine == "postgresql":
            from tests.private_pg import PrivateCluster

            self.cluster = PrivateCluster()
            self.cluster.start()
            self.url = self.cluster.url
        else:
            self.url = f"sqlite:///{self.dir / 'soak.db'}"
        self.store = self.open_store()

    def teardown(self) -> None:
        for i, proc in enumerate(self.workers):
            if proc is not None:
                _kill_group(proc)
                self.workers[i] = None
        if self.publisher is not None:
            _kill_group(self.publisher)
            self.publisher = None
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.close()
        if self.cluster is not None:
            self.cluster.destroy()

    # --------------------------------------------------------------------- workers
    def start_worker(self, k: int) -> None:
        self.worker_gen[k] += 1
        self.started_at[k] = time.monotonic()
        name = f"soak{k}g{self.worker_gen[k]}@%h"
        log = open(self.dir / f"worker{k}.log", "ab")  # noqa: SIM115
        self.workers[k] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.apps.proj",
                "worker",
                "-P",
                "prefork",
                "-c",
                str(self.s.concurrency),
                "-n",
                name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                f"--loglevel={self.s.loglevel}",
            ],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()

    def start_publisher(self, rate: float) -> None:
        self.publisher_gen += 1
        log = open(self.dir / "publisher.log", "ab")  # noqa: SIM115
        self.publisher = subprocess.Popen(
            [sys.executable, __file__, "_publish"],
            env=self.env(
                SOAK_CONFIRMED=str(self.confirmed),
                SOAK_TASKS=str(self.s.tasks),
                SOAK_RATE=str(rate),
                SOAK_GEN=str(self.publisher_gen),
                SOAK_SEED=str(self.s.seed),
                SOAK_TASK_SLEEP=str(self.s.task_sleep),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()

    def supervise(self, rate: float) -> None:
        """Restart workers and the publisher that are due for it (or died on their own)."""
        now = time.monotonic()
        for k, proc in enumerate(self.workers):
            if proc is not None and proc.poll() is not None:
                # Not killed by us (we clear the slot when we kill): a crash.
                self.report.unexpected_worker_exits += 1
                log = (self.dir / f"worker{k}.log").read_text(errors="replace")
                self.report.crashes.append(
                    {"worker": k, "code": proc.returncode, "log_tail": log[-3000:]}
                )
                self.workers[k] = None
                self.restart_at[k] = now
            if self.workers[k] is None and self.restart_at.get(k, 0) <= now:
                self.start_worker(k)
        pub = self.publisher
        if pub is not None and pub.poll() is not None:
            self.publisher = None
            if pub.returncode == 0:
                self.publisher_done = True
            else:
                self.publisher_restart_at = now
        if (
            self.publisher is None
            and not self.publisher_done
            and self.publisher_restart_at is not None
            and self.publisher_restart_at <= now
        ):
            self.start_publisher(rate)

    # ----------------------------------------------------------------------- chaos
    def kinds(self) -> list[tuple[str, int]]:
        if self.s.engine == "postgresql":
            return [
                ("kill_worker", 3),
                ("kill_child", 2),
                ("terminate_backends", 2),
                ("restart_cluster", 1),
                ("crash_cluster", 1),
                ("kill_publisher", 1),
            ]
        return [("kill_worker", 4), ("kill_child", 3), ("kill_publisher", 2)]

    def inject(self, kind: str) -> bool:
        """Inject one fault; False when there was nothing to break just now."""
        rnd = self.rnd
        started = time.time()  # the fault's time is when it begins
        if kind == "kill_worker":
            alive = [k for k, p in enumerate(self.workers) if p is not None]
            if not alive:
                return False
            k = rnd.choice(alive)
            proc = self.workers[k]
            self.workers[k] = None
            _kill_group(proc)
            self.restart_at[k] = time.monotonic() + rnd.uniform(0.2, 2.0)
        elif kind == "kill_child":
            # Only workers past start-up: a child killed while the pool starts makes Celery
            # give up ("Could not start worker processes"), a Celery start-up matter.
            settled = time.monotonic() - 5.0
            alive = [
                p
                for k, p in enumerate(self.workers)
                if p is not None and self.started_at.get(k, 0) <= settled
            ]
            children = [c for p in alive for c in _children(p.pid)]
            if not children:
                return False
            with contextlib.suppress(ProcessLookupError):
                os.kill(rnd.choice(children), signal.SIGKILL)
        elif kind == "terminate_backends":
            try:
                self.report.backends_terminated += self.cluster.terminate_backends()
            except Exception:
                return False
        elif kind in RESTARTS:
            self.cluster.stop("fast" if kind == "restart_cluster" else "immediate")
            time.sleep(rnd.uniform(0.5, 2.0))
            self.cluster.start()
        elif kind == "kill_publisher":
            if self.publisher is None:
                return False
            pub, self.publisher = self.publisher, None
            _kill_group(pub)
            self.publisher_restart_at = time.monotonic() + rnd.uniform(0.2, 1.0)
        self.events.append((started, kind))
        self.report.events = self.events
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        return True

    def chaos(self, rate: float) -> None:
        kinds = [k for k, _ in self.kinds()]
        weights = [w for _, w in self.kinds()]
        end = time.monotonic() + self.s.duration
        next_fault = time.monotonic() + self.rnd.uniform(*self.s.fault_gap)
        last_restart = 0.0
        first = list(kinds)
        self.rnd.shuffle(first)
        # Past the end only while a kind has yet to be injected once (for at most 30 s more,
        # or one more span if longer).
        overtime = end + max(self.s.duration, 30.0)
        while time.monotonic() < end or (first and time.monotonic() < overtime):
            self.supervise(rate)
            if time.monotonic() >= next_fault:
                # Every kind once (in a random order) first, then at random by weight.
                kind = first.pop() if first else self.rnd.choices(kinds, weights)[0]
                if kind in RESTARTS and time.monotonic() - last_restart < self.s.restart_gap:
                    if not self.report.faults.get(kind):
                        first.insert(0, kind)  # its first time: try again later
                    kind = "terminate_backends"
                if kind == "kill_publisher" and self.publisher_done:
                    kind = "kill_worker"
                injected = self.inject(kind)
                if injected and kind in RESTARTS:
                    last_restart = time.monotonic()
                elif not injected and kind not in first and not self.report.faults.get(kind):
                    first.append(kind)  # nothing to break just now: try that kind again
                next_fault = time.monotonic() + self.rnd.uniform(*self.s.fault_gap)
            time.sleep(0.1)

    # -------------------------------------------------------------------- evidence
    def records(self) -> list[str]:
        if not self.record.exists():
            return []
        return [ln.split("\t")[0] for ln in self.record.read_text().splitlines() if ln]

    def record_times(self) -> list[tuple[str, float]]:
        if not self.record.exists():
            return []
        lines = [ln.split("\t") for ln in self.record.read_text().splitlines() if ln]
        return [(f[0], float(f[2])) for f in lines]

    def dead_rows(self) -> list[dict]:
        from kombu.utils.json import loads

        out = []
        for job in self.store.dead_list(limit=1_000_000):
            key = None
            try:
                message = loads(bytes(job.body))
                body = message["body"]
                if message["properties"].get("body_encoding") == "base64":
                    import base64

                    body = base64.b64decode(body)
                args = loads(body)[0]
                key = args[0]
            except Exception:
                pass
            out.append(
                {
                    "id": job.id,
                    "key": key,
                    "task": int(key.split(".")[0]) if key else None,
                    "error": job.last_error,
                    "attempts": job.attempts,
                    "max_attempts": job.max_attempts,
                    "created_at": job.created_at,
                    "died_at": job.died_at,
                }
            )
        return out

    def settled(self) -> bool:
        if not self.publisher_done:
            return False
        done = {int(k.split(".")[0]) for k in self.records()}
        missing = set(range(self.s.tasks)) - done
        if not missing:
            return True
        dead = {d["task"] for d in self.dead_rows()}
        return not (missing - dead)

    def explain(self, dead: dict) -> bool:
        if dead["error"] != "attempts exhausted" or dead["attempts"] < dead["max_attempts"]:
            return False
        faults = [
            t
            for t, kind in self.events
            if kind in CLAIM_LOSING and dead["created_at"] - 1 <= t <= dead["died_at"]
        ]
        return len(faults) >= dead["max_attempts"]

    def analyse(self) -> None:
        r = self.report
        keys = self.records()
        per_key = collections.Counter(keys)
        per_task: dict[int, set[str]] = collections.defaultdict(set)
        for key in per_key:
            per_task[int(key.split(".")[0])].add(key)
        r.redelivered = sum(n - 1 for n in per_key.values())
        # Each rerun is put down to the last claim-losing fault before the first run ended
        # (the run whose ack was lost); "none" would be a rerun no fault explains.
        runs: dict[str, list[float]] = collections.defaultdict(list)
        for key, when in self.record_times():
            runs[key].append(when)
        causes: collections.Counter[str] = collections.Counter()
        for times in runs.values():
            for when in sorted(times)[:-1]:
                before = [(t, k) for t, k in self.events if k in CLAIM_LOSING and t <= when + 1]
                causes[max(before)[1] if before else "none"] += 1
        r.duplicate_causes = dict(causes)
        r.republished = sum(len(ks) - 1 for ks in per_task.values())
        r.duplicates = r.redelivered + r.republished
        dead = self.dead_rows()
        r.dead_letters = len(dead)
        for d in dead:
            d["ran"] = d["task"] in per_task
            d["faults_in_window"] = sum(
                1
                for t, kind in self.events
                if kind in CLAIM_LOSING and d["created_at"] - 1 <= t <= d["died_at"]
            )
            if self.explain(d):
                r.dead_explained += 1
            else:
                r.dead_unexplained.append(d)
        r.dead_never_ran = sum(1 for d in dead if not d["ran"])
        r.dead_detail = dead
        dead_tasks = {d["task"] for d in dead}
        lost = [i for i in range(self.s.tasks) if i not in per_task and i not in dead_tasks]
        r.lost, r.lost_keys = len(lost), lost[:50]
        r.ran = len(per_task)

    def requeue_dead(self, cap: float) -> None:
        """Requeue the explained dead letters: each must then run."""
        dead = [d for d in self.report.dead_detail if d not in self.report.dead_unexplained]
        if not dead:
            return
        self.store.dead_requeue([d["id"] for d in dead])
        want = {d["task"] for d in dead}
        end = time.monotonic() + cap
        while time.monotonic() < end:
            self.supervise(1.0)
            done = {int(k.split(".")[0]) for k in self.records()}
            if want <= done:
                break
            time.sleep(0.25)
        done = {int(k.split(".")[0]) for k in self.records()}
        self.report.dead_requeued_ran = len(want & done)
        self.report.ran = len(done)

    def scan_logs(self) -> None:
        r = self.report
        for path in self.dir.glob("worker*.log"):
            text = path.read_text(errors="replace")
            r.worker_log_tracebacks += text.count("Traceback (most recent call last)")
            r.lost_claim_warnings += text.count("lost the claim")
            r.refused_ack_warnings += text.count("refused: its claim lapsed")
            r.consumer_restart_storms += text.count("Frequent restarts detected")
        pub = self.dir / "publisher.log"
        if pub.exists():
            r.publish_retries = pub.read_text(errors="replace").count("retrying")

    def leftovers(self) -> None:
        counts = {c.queue: c for c in self.store.counts([QUEUE])}
        c = counts.get(QUEUE)
        self.report.leftover_rows = (c.pending + c.delayed + c.processing) if c else 0
        detail = []
        if self.report.leftover_rows:
            jobs = self.store.tables.qualified(self.store.tables.jobs)
            sql = (
                f"SELECT id, msg_id, state, attempts, max_attempts, run_at, deadline "
                f"FROM {jobs} WHERE queue = 'celery'"
            )
            detail = [
                dict(zip(("id", "msg_id", "state", "attempts", "max_attempts"), r[:5], strict=True))
                | {"run_at_in": r[5] - time.time(), "deadline_in": (r[6] or 0) - time.time()}
                for r in self._query(sql)
            ]
        self.report.leftover_detail = detail
        if self.s.engine == "sqlite":
            with contextlib.closing(sqlite3.connect(self.dir / "soak.db")) as conn:
                self.report.integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]

    def _query(self, sql: str) -> list[tuple]:
        """A read straight on the database (for the report only)."""
        if self.s.engine == "sqlite":
            with contextlib.closing(sqlite3.connect(self.dir / "soak.db")) as conn:
                return conn.execute(sql).fetchall()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    # ------------------------------------------------------------------------- run
    def run(self) -> Report:
        started = time.monotonic()
        s = self.s
        self.setup()
        try:
            rate = s.tasks / max(s.duration * 0.8, 1.0)
            for k in range(s.workers):
                self.start_worker(k)
            self.start_publisher(rate)
            self.chaos(rate)
            settle_start = time.monotonic()
            while time.monotonic() - settle_start < s.settle_cap:
                self.supervise(rate)
                if self.settled():
                    break
                time.sleep(0.25)
            self.report.settle_seconds = round(time.monotonic() - settle_start, 1)
            self.analyse()
            if not self.report.dead_unexplained:
                self.requeue_dead(min(s.settle_cap, 60.0))
            # Let the last acks land before counting what is left in the queue.
            end = time.monotonic() + 15
            while time.monotonic() < end:
                self.leftovers()
                if not self.report.leftover_rows:
                    break
                time.sleep(0.5)
            self.scan_logs()
        finally:
            self.teardown()
            self.report.elapsed = round(time.monotonic() - started, 1)
        return self.report


# ----------------------------------------------------------------------------- output
def summary(r: Report) -> str:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(r.faults.items())) or "none"
    lines = [
        f"== {r.engine}: {r.tasks} tasks, {r.workers} workers, {r.duration:g} s of chaos "
        f"({r.elapsed:g} s in all, settled {r.settle_seconds:g} s after the chaos)",
        f"   faults injected: {sum(r.faults.values())} ({faults})"
        + (f"; {r.backends_terminated} backends terminated" if r.backends_terminated else ""),
        f"   ran: {r.ran}/{r.tasks}   lost: {r.lost}" + (f" {r.lost_keys}" if r.lost_keys else ""),
        f"   duplicates: {r.duplicates} (redelivered {r.redelivered}, republished "
        f"{r.republished}; reruns after: "
        + (", ".join(f"{k} {v}" for k, v in sorted(r.duplicate_causes.items())) or "-")
        + ")",
        f"   dead letters: {r.dead_letters} (explained {r.dead_explained}, unexplained "
        f"{len(r.dead_unexplained)}, never ran before dying {r.dead_never_ran}, requeued and "
        f"ran {r.dead_requeued_ran})",
        f"   left in the queue: {r.leftover_rows}; unexpected worker exits: "
        f"{r.unexpected_worker_exits}; worker tracebacks: {r.worker_log_tracebacks}; "
        f"lost-claim warnings: {r.lost_claim_warnings}; refused acks: {r.refused_ack_warnings}; "
        f"publish retries: {r.publish_retries}; consumer restart storms: "
        f"{r.consumer_restart_storms}"
        + (f"; integrity_check: {r.integrity}" if r.engine == "sqlite" else ""),
        f"   verdict: {'OK' if r.ok else 'FAILED'}",
    ]
    for d in r.leftover_detail[:10]:
        lines.append(f"   left in the queue: {d}")
    for d in r.dead_unexplained[:10]:
        lines.append(f"   unexplained dead letter: {d}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_publish"]:
        return publisher_main()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["pg", "sqlite", "both"], default="both")
    p.add_argument("--tasks", type=int, default=None, help="tasks per engine")
    p.add_argument("--workers", type=int, default=3, help="worker processes per engine")
    p.add_argument("--duration", type=float, default=None, help="seconds of chaos per engine")
    p.add_argument("--short", action="store_true", help="CI size: both engines under 2 min")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-attempts", type=int, default=3, help="transport max_attempts")
    p.add_argument(
        "--visibility-timeout", type=float, default=6.0, help="transport visibility_timeout"
    )
    p.add_argument("--json", type=Path, default=None, help="write the reports here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--loglevel", default="WARNING", help="the workers' log level")
    args = p.parse_args(argv)
    if args.tasks is not None and args.tasks < 1:
        p.error("--tasks must be at least 1")
    if args.max_attempts < 1:
        p.error("--max-attempts must be at least 1")
    if args.visibility_timeout <= 0:
        p.error("--visibility-timeout must be positive")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.duration is not None and not 1 <= args.duration <= 3600:
        p.error("--duration must be between 1 and 3600 seconds")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    engines = {"pg": ["postgresql"], "sqlite": ["sqlite"], "both": ["postgresql", "sqlite"]}
    if args.short:
        tasks, duration, settle_cap = args.tasks or 300, args.duration or 25.0, 30.0
    else:
        tasks, duration, settle_cap = args.tasks or 2000, args.duration or 90.0, 120.0
    print(f"soak: seed {seed}", flush=True)
    reports = []
    for engine in engines[args.engine]:
        work = Path(tempfile.mkdtemp(prefix=f"alkstore-soak-{engine}-"))
        s = Settings(
            engine=engine,
            tasks=tasks,
            workers=args.workers,
            duration=duration,
            seed=seed,
            settle_cap=settle_cap,
            keep=args.keep,
            max_attempts=args.max_attempts,
            visibility_timeout=args.visibility_timeout,
            loglevel=args.loglevel,
            restart_gap=6.0 if args.short else 12.0,
        )
        report = Soak(s, work).run()
        reports.append(report)
        print(summary(report), flush=True)
        if args.keep or not report.ok or report.crashes:
            print(f"   work directory kept: {work}", flush=True)
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps([dict(asdict(r), ok=r.ok, seed=seed) for r in reports], indent=2)
        )
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
