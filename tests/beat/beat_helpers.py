"""Helpers for the beat tests: ``celery beat`` subprocesses, records, queued boundaries."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kombu_alkstore.store import Store
from tests.helpers import ROOT, kill_group, proc_env, read_record, worker_process

APP = "tests.apps.beatproj"
TASK = "tests.apps.beatproj.stamp"


def every(seconds: int, name: str = "tick", **extra) -> dict[str, str]:
    """Env for a beat whose ``beat_schedule`` is one ``@every`` entry, with the ``replay``
    catch-up policy as the beat's default (these tests count every boundary once across
    kills and restarts; the default ``once`` collapses missed ones)."""
    entry = {"schedule": f"@every {seconds}s", "task": TASK, **extra}
    return {"ALKSTORE_BEAT_SCHEDULE": json.dumps({name: entry}), "ALKSTORE_BEAT_CATCH_UP": "replay"}


@contextmanager
def beat_process(
    target, record: Path, log: Path, scheduler: str = "alkstore", **env: str
) -> Iterator[subprocess.Popen]:
    """A ``celery beat -S alkstore`` subprocess; always killed (with its session) on exit."""
    with beats(target, record, [log], scheduler, **env) as procs:
        yield procs[0]


@contextmanager
def beats(
    target, record: Path, logs: list[Path], scheduler: str = "alkstore", **env: str
) -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    outs = []
    try:
        for log in logs:
            out = open(log, "ab")  # noqa: SIM115
            outs.append(out)
            procs.append(start_beat(target, record, out, scheduler, **env))
        yield procs
    finally:
        for proc in procs:
            kill_group(proc)
        for out in outs:
            out.close()


def start_beat(target, record: Path, out, scheduler: str = "alkstore", **env: str):
    """A ``celery beat -S <scheduler>`` subprocess in its own session."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", APP, "beat", "-S", scheduler, "--loglevel=INFO"],
        env=proc_env(target, record, **env),
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )


@contextmanager
def beat_worker(target, record: Path, log: Path, **env: str) -> Iterator[subprocess.Popen]:
    with worker_process(
        target, record, "-P", "threads", "-c", "8", app=APP, log=log, **env
    ) as proc:
        yield proc


def runs(record: Path, name: str = "tick") -> list[tuple[float, float]]:
    """``(boundary, started)`` for each recorded run of schedule ``name``."""
    out = []
    for fields in read_record(record):
        if fields[0] == name:
            out.append((float(fields[1]), float(fields[2])))
    return out


def queued_boundaries(store: Store, queue: str = "celery", name: str | None = None) -> list:
    """Claim every queued job and return the boundaries their headers carry (no worker)."""
    found = []
    while True:
        batch = store.claim([queue], limit=100)
        if not batch:
            return found
        for d in batch:
            headers = json.loads(bytes(d.body))["headers"]
            if name is None or headers.get("alkstore_schedule") == name:
                found.append(headers["alkstore_boundary"])
        store.ack(batch)


def next_at(store: Store, name: str) -> float:
    return {r.name: r.next_at for r in store.schedule_list()}[name]


def jitter(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """p50/p99 of ``started - boundary`` in milliseconds."""
    lags = sorted((s - b) * 1000.0 for b, s in samples)
    if len(lags) < 2:
        return (lags[0], lags[0]) if lags else (float("nan"), float("nan"))
    q = statistics.quantiles(lags, n=100, method="inclusive")
    return q[49], q[98]


def log_text(*logs: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in logs if p.exists())


def sleep_until(deadline: float) -> None:
    delay = deadline - time.time()
    if delay > 0:
        time.sleep(delay)
