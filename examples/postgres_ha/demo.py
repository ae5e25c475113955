#!/usr/bin/env python3
"""Two beats on one PostgreSQL: kill the one that ticks, the other takes over.

    python examples/postgres_ha/demo.py [--broker alkstore+postgresql://user@host/db]

Starts a worker and two ``celery beat -S alkstore`` processes for ``proj.py`` (a task
every second), kills the beat holding the scheduler lease with SIGKILL, and shows that
the standby took over and that every one-second boundary was fired exactly once (the
schedule's catch-up policy is ``replay``, so the boundaries missed during the takeover
are each caught up). Uses its own schema (dropped at the end) and exits by itself
in about 30 seconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--broker",
        default=os.environ.get("HA_BROKER", "alkstore+postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--lease-ttl", type=float, default=4.0)
    args = parser.parse_args()

    from celery_beat_alkstore import LEASE_NAME
    from kombu_alkstore.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix="alkstore-ha-"))
    schema = f"ha_demo_{uuid.uuid4().hex[:8]}"
    record = tmp / "pulses.log"
    env = dict(
        os.environ,
        HA_BROKER=args.broker,
        HA_SCHEMA=schema,
        HA_RECORD=str(record),
        HA_LEASE_TTL=str(args.lease_ttl),
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    )
    store = open_store(args.broker.removeprefix("alkstore+"), schema=schema)
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, *argv: str) -> None:
        out = open(tmp / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "proj", *argv, "--loglevel=INFO"],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log(f"started {name} (pid {procs[name].pid})")

    def holder() -> str | None:
        owner = store.lease_holder(LEASE_NAME)
        if owner is None:
            return None
        for name, proc in procs.items():
            if f":{proc.pid}:" in owner:
                return name
        return owner

    def pulses() -> list[tuple[float, float]]:
        if not record.exists():
            return []
        rows = [ln.split("\t") for ln in record.read_text().splitlines() if ln]
        return [(float(b), float(t)) for b, t in rows if b not in ("None", "")]

    code = 1
    try:
        log(f"broker {args.broker}, schema {schema}, lease TTL {args.lease_ttl:g}s")
        start("worker", "worker", "--concurrency=2")
        start("beat-a", "beat", "-S", "alkstore")
        start("beat-b", "beat", "-S", "alkstore")
        deadline = time.monotonic() + 20
        while len(pulses()) < 5:
            if time.monotonic() > deadline:
                raise RuntimeError("no pulses from beat within 20 s")
            time.sleep(0.2)
        leader = holder()
        log(f"ticking: {leader} holds the lease; pulses so far: {len(pulses())}")

        killed_at = time.time()
        os.killpg(procs[leader].pid, signal.SIGKILL)
        log(f"killed {leader} with SIGKILL")
        deadline = time.monotonic() + args.lease_ttl + 15
        while True:
            new = holder()
            if new not in (None, leader):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("no beat took over the lease")
            time.sleep(0.1)
        log(f"{new} took over the lease {time.time() - killed_at:.1f}s after the kill")
        time.sleep(args.lease_ttl + 4)

        seen = pulses()
        boundaries = [b for b, _ in seen]
        unique = sorted(set(boundaries))
        dupes = len(boundaries) - len(unique)
        first, last = unique[0], unique[-1]
        missing = [b for b in range(int(first), int(last) + 1) if float(b) not in unique]
        log(
            f"boundaries fired: {len(unique)} (from {first:.0f} to {last:.0f}); "
            f"fired twice: {dupes}; missing: {len(missing)}"
        )
        late = [t - b for b, t in seen if killed_at - 1 <= b <= killed_at + args.lease_ttl + 1]
        if late:
            log(f"boundaries during the takeover ran up to {max(late):.1f}s late (caught up)")
        code = 0 if not dupes and not missing else 1
    except Exception as exc:
        log(f"FAILED: {exc!r}")
        for name in procs:
            lines = (tmp / f"{name}.log").read_text(errors="replace").splitlines()
            log(f"--- {name} log (last lines) ---")
            for line in lines[-15:]:
                log(f"    {line}")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        store.close()
        if args.broker.startswith(("alkstore+postgresql", "postgresql")):
            import psycopg

            with psycopg.connect(store.url.conninfo, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    log("done: each boundary fired once" if code == 0 else "done: FAILED")
    return code


if __name__ == "__main__":
    sys.exit(main())
