"""Many hosts on one broker: 4 worker processes (prefork 2 each) and 4 concurrent
publishers, alkstore on PostgreSQL beside Redis and RabbitMQ, in one run.

    python benchmarks/many_hosts.py [--tasks 8000] [--rate 100] [--seconds 10]

Per broker: **publish** (4 publisher processes, started together once each has connected
and sent one warm-up message; confirmed publishes: alkstore's durable commit, RabbitMQ
publisher confirms, Redis's reply; from the start to the last publish returned; with the
CPU each publish took in the publishers and in the broker's server processes, which
share this machine's cores),
**drain** (the backlog left by the publish, by 4 ``celery worker -P prefork -c 2``
processes started together: first to last task start; with the CPU per task of the
workers and of the broker's server processes) and **latency under load** (4
publishers sending probes at ``--rate`` each per second, each at a random phase, while the
workers run: task start minus send, p50/p99) and **publish while busy** (the same
publish while every worker process runs a 1 s task with its prefetch full: the CPU a
publish then costs in the server and in the busy workers, which take none of it yet).
Ratios against Redis and RabbitMQ are printed at the end. Places are private (schema,
vhost, Redis db 15).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from benchmarks.harness.brokers import PG_URL, make_place  # noqa: E402
from benchmarks.harness.procs import group_cpu_seconds, proc_stats  # noqa: E402

TASKS = """
import json, os, random, sys, time
from celery import Celery
import kombu_alkstore  # noqa: F401
BROKER = os.environ["MH_BROKER"]
app = Celery("mh", broker=BROKER, set_as_current=False)
app.conf.update(broker_transport_options=json.loads(os.environ["MH_OPTIONS"]),
                task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True, worker_prefetch_multiplier=4)
RECORD = os.environ["MH_RECORD"]

def _record(*fields):
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, ("\\t".join(fields) + "\\n").encode())
    finally:
        os.close(fd)

@app.task(name="mh.noop")
def noop():
    _record("drain", repr(time.time()), str(os.getppid()))  # and which worker

@app.task(name="mh.probe")
def probe(sent):
    _record("probe", repr(sent), repr(time.time()))

@app.task(name="mh.warm")
def warm():
    pass

@app.task(name="mh.slow")
def slow():
    _record("slow", repr(time.time()))
    time.sleep(1.0)

if __name__ == "__main__":  # a publisher: mode, count, rate (per second; 0: flat out)
    mode, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with app.producer_or_acquire() as producer:
        app.send_task("mh.warm", producer=producer)  # connected, queue declared
        print("ready", flush=True)
        sys.stdin.readline()  # "go": the four start together
        start, cpu = time.time(), time.process_time()
        if rate:  # paced publishers are not in step: each at a phase of its own
            start += random.random() / rate
            time.sleep(start - time.time())
        for i in range(count):
            if mode in ("noop", "slow"):
                app.send_task(f"mh.{mode}", producer=producer)
            else:
                app.send_task("mh.probe", (time.time(),), producer=producer)
            if rate:
                delay = start + (i + 1) / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
        # the end, and this process's CPU seconds publishing; then stay connected until
        # "bye" (the broker's CPU is read first: a server process of ours ends with us)
        print(time.time(), time.process_time() - cpu, flush=True)
        sys.stdin.readline()
"""


#: The broker's server processes, by broker, as /proc/<pid>/comm names them.
SERVER_PROCESS = {
    "alkstore-postgresql": "postgres",
    "redis": "redis-server",
    "rabbitmq": "beam.smp",
}


def server_cpu(broker: str) -> float:
    """CPU seconds used so far by every live server process of ``broker`` (Linux)."""
    name, ticks = SERVER_PROCESS[broker], 0
    for pid, fields in proc_stats():
        with contextlib.suppress(OSError):  # ended meanwhile
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def transactions(broker: str) -> int | None:
    """alkstore: the database's transaction counter (each transaction that writes takes
    the next number: the drain's claims, acks and heartbeats; nothing else writes)."""
    if not broker.startswith("alkstore"):
        return None
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT txid_current()").fetchone()[0]


def publishers(
    broker: str, env: dict, workdir: Path, mode: str, count: int, rate: float
) -> tuple[float, float, float]:
    """4 publisher processes, ``count`` messages each, started together once each has
    connected and published one warm-up message. Returns the seconds from the start to
    the last publish returned (interpreter start-up and connecting are not counted), the
    publishers' CPU seconds and the broker's server CPU seconds over the same span."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(workdir / "mh_tasks.py"), mode, str(count), str(rate)],
            env=env,
            cwd=workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise _failed("a publisher did not start", p, p.communicate(timeout=30)[1])
        server, start = server_cpu(broker), time.time()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        ends = [p.stdout.readline().split() for p in procs]
        server = server_cpu(broker) - server
        for p, end in zip(procs, ends, strict=True):
            p.stdin.write("bye\n")
            p.stdin.flush()
            err = p.communicate(timeout=60)[1]
            if p.returncode != 0 or len(end) != 2:
                raise _failed("a publisher failed", p, err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return max(float(e[0]) for e in ends) - start, sum(float(e[1]) for e in ends), server


def busy_publish(
    broker: str, env: dict, workdir: Path, tasks: int, record: Path, workers_cpu
) -> dict[str, float]:
    """Publish while every worker is busy: the four workers hold a backlog of 1 s tasks
    (all 8 processes running one, their prefetch full) while the four publishers send
    ``tasks`` more. What a publish costs then, in the broker's server processes and in
    the busy workers, which take none of these messages yet."""
    publishers(broker, env, workdir, "slow", 50, 0)  # 200 s of work for 8 processes
    deadline = time.time() + 60
    while len(records(record, "slow")) < 8 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # prefetch filled
    before = workers_cpu()
    seconds, _, server = publishers(broker, env, workdir, "noop", tasks // 4, 0)
    return {
        "busy publish/s": tasks / seconds,
        "busy server us/pub": 1e6 * server / tasks,
        "busy workers us/pub": 1e6 * (workers_cpu() - before) / tasks,
    }


def _failed(what: str, p: subprocess.Popen, err: str) -> RuntimeError:
    """The error for a publisher that failed: its exit status and the end of its stderr."""
    return RuntimeError(f"{what}: exit {p.returncode}\n{err[-3000:]}")


def records(path: Path, kind: str) -> list[list[str]]:
    if not path.exists():
        return []
    return [ln.split("\t") for ln in path.read_text().splitlines() if ln.startswith(kind)]


def run(broker: str, args, workdir: Path) -> dict:
    place = make_place(broker, workdir)
    record = workdir / f"{broker}.tsv"
    options = dict(place.options)
    if broker == "rabbitmq":
        options["confirm_publish"] = True
    env = dict(
        os.environ,
        MH_BROKER=place.worker_url,
        MH_OPTIONS=json.dumps(options),
        MH_RECORD=str(record),
        PYTHONPATH=f"{workdir}{os.pathsep}{ROOT}",
    )
    workers: list[subprocess.Popen] = []
    try:
        if broker.startswith("alkstore"):  # the tables, before the clock starts
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import mh_tasks; mh_tasks.app.connection().ensure_connection(max_retries=3)",
                ],
                env=env,
                cwd=workdir,
                check=True,
            )
        publish_s, client_cpu, broker_cpu = publishers(
            broker, env, workdir, "noop", args.tasks // 4, 0
        )
        for n in range(4):
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "mh_tasks",
                        "worker",
                        "-P",
                        "prefork",
                        "-c",
                        "2",
                        "-n",
                        f"mh{n}@%h",
                        "--loglevel=WARNING",
                    ],
                    env=env,
                    cwd=workdir,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

        # CPU per task of the drain: from the time all four workers have started tasks
        # (their start-up is not counted) to the last
        def workers_cpu() -> float:  # each worker runs in a session of its own
            return sum(group_cpu_seconds(w.pid) for w in workers)

        deadline, first = time.time() + 600, None
        while len(rows := records(record, "drain")) < args.tasks and time.time() < deadline:
            if first is None and len({r[2] for r in rows}) == 4:
                first = (len(rows), workers_cpu(), server_cpu(broker), transactions(broker))
            time.sleep(0.05)
        if first is None:
            raise RuntimeError(f"{broker}: the four workers did not all run tasks")
        rows = records(record, "drain")
        drained = len(rows) - first[0]
        worker_cpu = (workers_cpu() - first[1]) / drained
        drain_server_cpu = (server_cpu(broker) - first[2]) / drained
        if first[3] is not None:
            per_task = (transactions(broker) - first[3]) / drained
            print(f"{broker}: {per_task:.2f} write transactions per task drained", flush=True)
        starts = sorted(float(r[1]) for r in rows)
        drain_s = starts[-1] - starts[0]
        probes = int(args.rate * args.seconds)
        publishers(broker, env, workdir, "probe", probes, args.rate)
        deadline = time.time() + 120
        while len(records(record, "probe")) < 4 * probes and time.time() < deadline:
            time.sleep(0.2)
        lat = sorted(float(r[2]) - float(r[1]) for r in records(record, "probe"))
        busy = busy_publish(broker, env, workdir, args.tasks, record, workers_cpu)
        return {
            "publish/s": args.tasks / publish_s,
            "client us/pub": 1e6 * client_cpu / args.tasks,
            "server us/pub": 1e6 * broker_cpu / args.tasks,
            "drain/s": (len(starts) - 1) / drain_s,
            "workers us/task": 1e6 * worker_cpu,
            "server us/task": 1e6 * drain_server_cpu,
            "p50 ms": 1000 * lat[len(lat) // 2],
            "p99 ms": 1000 * lat[int(len(lat) * 0.99) - 1],
            **busy,
        }
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.pid, signal.SIGKILL)
            w.wait(10)
        place.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=8000)
    parser.add_argument("--rate", type=float, default=100.0, help="probes/s per publisher")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--brokers", default="alkstore-postgresql,redis,rabbitmq")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="alkstore-mh-"))
    (workdir / "mh_tasks.py").write_text(TASKS)
    results = {}
    try:
        for broker in args.brokers.split(","):
            results[broker] = run(broker, args, workdir)
            print(broker, {k: round(v, 1) for k, v in results[broker].items()}, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ours = results.get("alkstore-postgresql")
    columns = [
        "publish/s",
        "client us/pub",
        "server us/pub",
        "drain/s",
        "workers us/task",
        "server us/task",
        "p50 ms",
        "p99 ms",
        "busy publish/s",
        "busy server us/pub",
        "busy workers us/pub",
    ]
    width = {c: max(10, len(c)) + 2 for c in columns}
    print("\n" + f"{'broker':22}" + "".join(f"{c:>{width[c]}}" for c in columns))
    for broker, r in results.items():
        print(f"{broker:22}" + "".join(f"{r[c]:>{width[c]}.1f}" for c in columns))
    if ours:
        for other in ("redis", "rabbitmq"):
            if other in results:
                o = results[other]
                print(
                    f"alkstore / {other}: publish {ours['publish/s'] / o['publish/s']:.2f}x, "
                    f"drain {ours['drain/s'] / o['drain/s']:.2f}x, p99 latency "
                    f"{ours['p99 ms'] / o['p99 ms']:.2f}x"
                )


if __name__ == "__main__":
    main()
