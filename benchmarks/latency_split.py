"""Idle-worker latency split in two: the publisher's ``apply_async`` and what follows it.

``python benchmarks/latency_split.py [--rounds 3] [--samples 300]`` runs alkstore on
PostgreSQL with the hand-off on and off (transport option ``handoff``) and Redis,
interleaved, each with a ``celery worker`` subprocess (prefork 2, threads 4). Probes are sent
20 ms apart to the idle worker; the publisher records when ``apply_async`` returns and the
task when it starts. It prints, per round, the p50 of: send → task start, the
``apply_async`` call, and its return → task start (docs/benchmarks.md, "Idle-worker
latency, after the hand-off"). Figures to compare, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

PG = "postgresql://postgres@127.0.0.1:5432/test"
CASES = [
    ("alkstore, hand-off", f"alkstore+{PG}", {"handoff": True}),
    ("alkstore, handoff=False", f"alkstore+{PG}", {"handoff": False}),
    ("redis", "redis://127.0.0.1:6379/14", {}),
]
APP = """
import os, time
import kombu_alkstore  # noqa: F401
from celery import Celery

app = Celery("split", broker=os.environ["SPLIT_BROKER"], set_as_current=False)
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                broker_transport_options=__import__("json").loads(os.environ["SPLIT_OPTIONS"]))

@app.task(name="probe", shared=False)
def probe(i):
    line = f"{i}\\t{time.time()!r}\\n".encode()
    fd = os.open(os.environ["SPLIT_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line)
    os.close(fd)
"""


def run_case(workdir: Path, broker: str, options: dict, pool: str, samples: int) -> tuple:
    record = workdir / f"{uuid.uuid4().hex}.tsv"
    env = dict(
        os.environ,
        PYTHONPATH=f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        SPLIT_BROKER=broker,
        SPLIT_OPTIONS=json.dumps(options),
        SPLIT_RECORD=str(record),
    )
    os.environ.update({k: env[k] for k in ("SPLIT_BROKER", "SPLIT_OPTIONS", "SPLIT_RECORD")})
    sys.modules.pop("split_app", None)
    import split_app  # the same app module the worker runs

    concurrency = "2" if pool == "prefork" else "4"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "split_app", "worker", "-P", pool, "-c",
         concurrency, "-l", "WARNING", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        split_app.probe.apply_async((-1,))
        deadline = time.monotonic() + 60
        while not (record.exists() and record.read_text()):
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.1)
        time.sleep(1.0)
        sent, returned = [], []
        for i in range(samples):
            time.sleep(0.02)
            sent.append(time.time())
            split_app.probe.apply_async((i,))
            returned.append(time.time())
        deadline = time.monotonic() + 30
        while len(record.read_text().splitlines()) < samples + 1:
            assert time.monotonic() < deadline, "probes missing"
            time.sleep(0.1)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        split_app.app.close()
    started = {int(i): float(t) for i, t in (line.split("\t") for line in record.open())}
    ms = [
        (started[i] - sent[i], returned[i] - sent[i], started[i] - returned[i])
        for i in range(samples)
    ]
    return tuple(statistics.median(m[k] for m in ms) * 1000 for k in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=300)
    args = ap.parse_args()
    schema = f"split_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "split_app.py").write_text(APP)
        sys.path.insert(0, str(workdir))
        try:
            print("round  case                      pool     p50 ms  apply_async  after it")
            for rnd in range(1, args.rounds + 1):
                for pool in ("prefork", "threads"):
                    for label, broker, options in CASES:
                        if broker.startswith("alkstore"):
                            options = {**options, "schema": schema}
                        p50, call, after = run_case(workdir, broker, options, pool, args.samples)
                        row = f"{rnd:5}  {label:24}  {pool:7}  {p50:6.2f}  {call:11.2f}"
                        print(f"{row}  {after:8.2f}")
        finally:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
