"""Publish references in the same sitting: PostgreSQL's own durable insert rate
(pgbench, one client and four), and several publishing processes at once.

- :func:`run_pgbench`: ``pgbench -n -M prepared`` on a one-row INSERT (a queue name, a
  300-byte body and a float, into a table with a bigserial key) in a private schema,
  ``synchronous_commit`` as the server has it (on: a durable commit each), for 1 and for
  :data:`PUBLISHERS` clients. An Outcome of broker ``pgbench``: ``publish`` (one client)
  and ``publish4`` (four), in transactions per second.
- :func:`concurrent_publish`: :data:`PUBLISHERS` publishing clients (each a process, the
  harness's client), warmed up, then each told to publish its share at once; the rate is
  all the tasks over the span from the first start to the last end. They publish to the
  queue ``bench-multi``, which no worker consumes, so the drain phase is unchanged.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from .brokers import PG_URL, drop_schema, pg_admin
from .procs import Client
from .session import Config, Outcome, log

#: Concurrent publishers (and pgbench clients) of the multi-publisher figure.
PUBLISHERS = 4
#: The queue they publish to (not consumed).
MULTI_QUEUE = "bench-multi"
PGBENCH = "pgbench"


def pgbench_path() -> str | None:
    """pgbench from the newest /usr/lib/postgresql/*/bin, else on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pgbench"),
        key=lambda p: int(re.sub(r"\D", "", p.split("/")[4]) or 0),
    )
    if found:
        return found[-1]
    from shutil import which

    return which("pgbench")


def run_pgbench(rep: int, cfg: Config) -> Outcome:
    """pgbench's durable one-row inserts, 1 client and PUBLISHERS clients."""
    out = Outcome(PGBENCH, "—", rep)
    exe = pgbench_path()
    if exe is None:
        out.failed = True
        out.notes.append("FAILED: pgbench not found (/usr/lib/postgresql/*/bin, PATH)")
        return out
    schema = f"pgbench_{uuid.uuid4().hex[:10]}"
    table = f'"{schema}".t'
    pg_admin(f'CREATE SCHEMA "{schema}"')
    try:
        pg_admin(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, queue text NOT NULL, "
            "body bytea NOT NULL, created_at float8 NOT NULL)"
        )
        script = (
            f"INSERT INTO {table} (queue, body, created_at) "
            f"VALUES ('celery', decode(repeat('78', 300), 'hex'), 1.0);\n"
        )
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
            f.write(script)
        try:
            for clients, metric in ((1, "publish"), (PUBLISHERS, "publish4")):
                tps = _pgbench(exe, f.name, clients, cfg.pgbench_seconds)
                out.values[metric] = tps
                log(f"[r{rep} pgbench] {clients} client(s): {tps:,.0f} tps")
        finally:
            os.unlink(f.name)
        out.notes.append(
            f"pgbench -n -M prepared -T {cfg.pgbench_seconds:g}, one-row INSERT "
            f"(300-byte bytea), clients 1 and {PUBLISHERS}"
        )
    except Exception as exc:  # a reference figure: never stop the run
        out.failed = True
        out.notes.insert(0, f"FAILED: {type(exc).__name__}: {exc}")
        log(f"[r{rep} pgbench] FAILED: {exc}")
    finally:
        drop_schema(schema)
    return out


def _pgbench(exe: str, script: str, clients: int, seconds: float) -> float:
    proc = subprocess.run(
        [exe, "-n", "-M", "prepared", "-f", script, "-c", str(clients), "-j", str(clients)]
        + ["-T", str(max(1, round(seconds))), PG_URL],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    match = re.search(r"tps = ([\d.]+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return float(match.group(1))


def concurrent_publish(
    first: Client, env: dict, workdir: Path, logfile: Path, cfg: Config
) -> float:
    """Tasks per second of PUBLISHERS clients publishing cfg.tasks tasks between them
    (``first`` is one of them, already connected)."""
    clients = [first]
    try:
        while len(clients) < PUBLISHERS:
            clients.append(Client(workdir, env, logfile))
        share = max(1, cfg.tasks // PUBLISHERS)
        for c in clients:  # each connects and declares before the clock starts
            c.call(["publish", "1", "--queue", MULTI_QUEUE], 120)
        time.sleep(0.2)
        for c in clients:
            c.send(["publish", str(share), "--no-warmup", "--queue", MULTI_QUEUE])
        got = [c.receive(120 + share / 20, "concurrent publish") for c in clients]
    finally:
        for c in clients[1:]:
            c.close()
    span = max(g["end"] for g in got) - min(g["start"] for g in got)
    return share * len(clients) / span
