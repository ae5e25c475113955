"""Many hosts on one broker: 4 worker processes (prefork 2 each) and 4 concurrent
publishers, alkstore on PostgreSQL beside Redis and RabbitMQ, in one run.

    python benchmarks/many_hosts.py [--tasks 8000] [--rate 100] [--seconds 10]

Per broker: **publish** (4 publisher processes, started together once each has connected
and sent one warm-up message; confirmed publishes: alkstore's durable commit, RabbitMQ
publisher confirms, Redis's reply; from the start to the last publish returned),
**drain** (the backlog left by the publish, by 4 ``celery worker -P prefork -c 2``
processes started together: first to last task start) and **latency under load** (4
publishers sending probes at ``--rate`` each per second, each at a random phase, while the
workers run: task start minus send, p50/p99). Ratios against Redis and RabbitMQ are
printed at the end. Places are private (schema, vhost, Redis db 15).
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

from benchmarks.harness.brokers import make_place  # noqa: E402

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
    _record("drain", repr(time.time()))

@app.task(name="mh.probe")
def probe(sent):
    _record("probe", repr(sent), repr(time.time()))

@app.task(name="mh.warm")
def warm():
    pass

if __name__ == "__main__":  # a publisher: mode, count, rate (per second; 0: flat out)
    mode, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with app.producer_or_acquire() as producer:
        app.send_task("mh.warm", producer=producer)  # connected, queue declared
        print("ready", flush=True)
        sys.stdin.readline()  # "go": the four start together
        start = time.time()
        if rate:  # paced publishers are not in step: each at a phase of its own
            start += random.random() / rate
            time.sleep(start - time.time())
        for i in range(count):
            if mode == "noop":
                app.send_task("mh.noop", producer=producer)
            else:
                app.send_task("mh.probe", (time.time(),), producer=producer)
            if rate:
                delay = start + (i + 1) / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
    print(time.time(), flush=True)
"""


def publishers(env: dict, workdir: Path, mode: str, count: int, rate: float) -> float:
    """4 publisher processes, ``count`` messages each, started together once each has
    connected and published one warm-up message; seconds from the start to the last
    publish returned (interpreter start-up and connecting are not counted)."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(workdir / "mh_tasks.py"), mode, str(count), str(rate)],
            env=env,
            cwd=workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a publisher did not start: exit {p.wait(30)}")
        start = time.time()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        ends = [float(p.communicate(timeout=600)[0].split()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return max(ends) - start


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
        publish_s = publishers(env, workdir, "noop", args.tasks // 4, 0)
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
        deadline = time.time() + 600
        while len(records(record, "drain")) < args.tasks and time.time() < deadline:
            time.sleep(0.2)
        starts = sorted(float(r[1]) for r in records(record, "drain"))
        drain_s = starts[-1] - starts[0]
        probes = int(args.rate * args.seconds)
        publishers(env, workdir, "probe", probes, args.rate)
        deadline = time.time() + 120
        while len(records(record, "probe")) < 4 * probes and time.time() < deadline:
            time.sleep(0.2)
        lat = sorted(float(r[2]) - float(r[1]) for r in records(record, "probe"))
        return {
            "publish/s": args.tasks / publish_s,
            "drain/s": (len(starts) - 1) / drain_s,
            "p50 ms": 1000 * lat[len(lat) // 2],
            "p99 ms": 1000 * lat[int(len(lat) * 0.99) - 1],
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
    print(f"\n{'broker':22} {'publish/s':>10} {'drain/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for broker, r in results.items():
        print(
            f"{broker:22} {r['publish/s']:>10.0f} {r['drain/s']:>9.0f} "
            f"{r['p50 ms']:>8.1f} {r['p99 ms']:>8.1f}"
        )
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
