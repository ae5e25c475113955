"""Beat firing jitter: boundary -> task start, with three beats running, on each engine.

    python benchmarks/beat_jitter.py [--seconds 30] [--schedules 5] [--engines postgresql sqlite]

Starts one ``celery worker`` (threads pool) and three ``celery beat -S alkstore`` processes
on a fresh schema (PostgreSQL, ``$ALKSTORE_TEST_PG``) or a fresh SQLite file, with
``--schedules`` schedules ``@every 1s``. Each task run records the boundary it was fired
for (from its message headers) and when it started; the script prints p50/p99/max of
``start - boundary``. Every process is killed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
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

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TASK = "tests.apps.beatproj.stamp"


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.apps.beatproj", *args],
        env=env,
        stdout=open(log, "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def run(engine: str, seconds: float, schedules: int, workdir: Path) -> dict:
    schema = "bench_" + uuid.uuid4().hex[:10]
    url = PG_URL if engine == "postgresql" else f"sqlite:///{workdir / f'{schema}.db'}"
    record = workdir / f"{schema}.record"
    entries = {f"s{i}": {"schedule": "@every 1s", "task": TASK} for i in range(schedules)}
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        ALKSTORE_TEST_BROKER=f"alkstore+{url}",
        ALKSTORE_TEST_SCHEMA=schema,
        ALKSTORE_TEST_RECORD=str(record),
        ALKSTORE_BEAT_SCHEDULE=json.dumps(entries),
        ALKSTORE_BEAT_LEASE_TTL="10",
        ALKSTORE_BEAT_MAX_INTERVAL="5",
    )
    procs = []
    try:
        procs.append(
            _spawn(
                ["worker", "-P", "threads", "-c", "8", "-l", "WARNING"],
                env,
                workdir / f"{schema}.worker.log",
            )
        )
        for i in range(3):
            procs.append(
                _spawn(
                    ["beat", "-S", "alkstore", "-l", "WARNING"],
                    env,
                    workdir / f"{schema}.beat{i}.log",
                )
            )
        # Measure from when all are up: skip the first boundaries (start-up).
        time.sleep(5)
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        time.sleep(2)  # let the last runs be recorded
    finally:
        for p in procs:
            _kill(p)
    lags, seen = [], {}
    for line in record.read_text().splitlines() if record.exists() else []:
        name, boundary, started = line.split("\t")[:3]
        b, s = float(boundary), float(started)
        seen[(name, b)] = seen.get((name, b), 0) + 1
        if start <= b < end - 1:
            lags.append((s - b) * 1000.0)
    expected = {
        (f"s{i}", float(b)) for i in range(schedules) for b in range(int(start) + 1, int(end - 1))
    }
    if engine == "postgresql":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    lags.sort()
    q = statistics.quantiles(lags, n=100, method="inclusive") if len(lags) > 1 else [0.0] * 99
    return {
        "engine": engine,
        "runs": len(lags),
        "p50_ms": round(q[49], 1),
        "p99_ms": round(q[98], 1),
        "max_ms": round(lags[-1], 1) if lags else None,
        "duplicates": sum(1 for n in seen.values() if n > 1),
        "missing": len(expected - set(seen)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--schedules", type=int, default=5)
    p.add_argument("--engines", nargs="+", default=["postgresql", "sqlite"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="beat-jitter-") as tmp:
        for engine in args.engines:
            result = run(engine, args.seconds, args.schedules, Path(tmp))
            print(json.dumps(result))


if __name__ == "__main__":
    main()
