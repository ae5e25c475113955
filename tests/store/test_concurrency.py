"""Several OS processes on one store, on both engines.

(a) 4 processes claim 10,000 jobs in batches of 10 and ack them: every job is claimed
exactly once, none twice. (b) 8 processes run ``setup`` at once on a fresh schema/file.

The workers are ``python -c`` subprocesses that wait at a file barrier (each writes a
"ready" file, the test then creates a "go" file) so they really start together; each
writes what it saw to a JSON file. Every process is killed and reaped even on failure.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kombu_alkstore.store import NewJob
from kombu_alkstore.store.schema import SCHEMA_VERSION

JOBS = 10_000
CLAIMERS = 4
SETUPS = 8
TIMEOUT = 90.0

_PRELUDE = r"""
import json, os, sys, time
from kombu_alkstore.store import open_store

url, schema, workdir, name = sys.argv[1:5]
ready = os.path.join(workdir, name + ".ready")
go = os.path.join(workdir, "go")
out = os.path.join(workdir, name + ".json")
open(ready, "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never got the go signal")
    time.sleep(0.002)
"""

CLAIM_WORKER = (
    _PRELUDE
    + r"""
store = open_store(url, schema=schema, setup=False)
mine, batches, empty = [], 0, 0
while empty < 5:
    got = store.claim(["q"], 10)
    if not got:
        empty += 1  # the rest may be held by claims in flight; look again shortly
        time.sleep(0.02)
        continue
    empty = 0
    batches += 1
    landed = store.ack(got)
    if landed != {d.id for d in got}:
        sys.exit(f"ack did not land for {sorted({d.id for d in got} - landed)}")
    if any(d.attempts != 1 for d in got):
        sys.exit(f"redelivered: {[(d.id, d.attempts) for d in got if d.attempts != 1]}")
    mine.extend(d.id for d in got)
store.close()
with open(out, "w") as f:
    json.dump({"ids": mine, "batches": batches}, f)
"""
)

SETUP_WORKER = (
    _PRELUDE
    + r"""
store = open_store(url, schema=schema)  # setup=True: creates the tables
store.setup()  # and once more, racing the others
version = store.schema_version()
store.close()
with open(out, "w") as f:
    json.dump({"version": version}, f)
"""
)


def run_together(code: str | list[str], target, workdir: Path, n: int) -> list[dict]:
    """Start ``n`` workers (each running ``code``, or its own of a list of ``n``),
    release them at once, and return what each wrote."""
    codes = code if isinstance(code, list) else [code] * n
    workdir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(n):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        codes[i],
                        target.url,
                        target.schema,
                        str(workdir),
                        f"w{i}",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        end = time.monotonic() + TIMEOUT
        while not all((workdir / f"w{i}.ready").exists() for i in range(n)):
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                _, err = dead[0].communicate()
                pytest.fail(f"a worker died before the barrier: {err.decode()[-2000:]}")
            if time.monotonic() > end:
                pytest.fail("workers did not reach the barrier in time")
            time.sleep(0.01)
        (workdir / "go").touch()
        failures = []
        for i, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=max(end - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker w{i} did not finish within {TIMEOUT} s")
            if p.returncode != 0:
                failures.append(f"w{i} exited {p.returncode}: {err.decode()[-2000:]}")
        assert not failures, "\n".join(failures)
        return [json.loads((workdir / f"w{i}.json").read_text()) for i in range(n)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                p.communicate(timeout=10)


def test_four_processes_claim_each_job_exactly_once(target, tmp_path):
    store = target.open()
    try:
        ids: list[int] = []
        for start in range(0, JOBS, 1000):
            ids += store.enqueue_many(
                [NewJob("q", str(i).encode()) for i in range(start, min(start + 1000, JOBS))]
            )
        assert len(set(ids)) == JOBS

        results = run_together(CLAIM_WORKER, target, tmp_path / "claim", CLAIMERS)

        per_process = [r["ids"] for r in results]
        claimed = [i for got in per_process for i in got]
        assert sum(len(got) for got in per_process) == JOBS  # none twice…
        assert set(claimed) == set(ids)  # …and every one once
        assert len(set(claimed)) == len(claimed)
        # The claims really raced. (Not every process need get work: on SQLite the busy
        # handler is not fair, and a process can sleep in it until the queue is empty.)
        assert sum(1 for r in results if r["batches"]) >= 2, [r["batches"] for r in results]
        (c,) = store.counts(["q"])
        assert (c.pending, c.delayed, c.processing, c.dead) == (0, 0, 0, 0)
        assert store.claim(["q"], 10) == []
    finally:
        store.close()


def test_eight_processes_run_setup_at_once(target, tmp_path):
    if target.engine == "sqlite":
        assert not Path(target.url.removeprefix("sqlite:///")).exists()  # a fresh file

    results = run_together(SETUP_WORKER, target, tmp_path / "setup", SETUPS)

    assert [r["version"] for r in results] == [SCHEMA_VERSION] * SETUPS
    store = target.open(setup=False)  # the tables are there
    try:
        assert store.schema_version() == SCHEMA_VERSION
        jid = store.enqueue("q", b"x")
        assert [d.id for d in store.claim(["q"], 1)] == [jid]
    finally:
        store.close()
