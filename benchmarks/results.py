"""Result backends side by side: ``python -m benchmarks.results``.

The broker is alkstore on PostgreSQL for every row; the result backend varies:

* ``alkstore``: this package's backend in the broker's database (``alkstore://``);
* ``redis``: Celery's Redis backend (``redis://127.0.0.1:6379/15``);
* ``db+postgresql``: Celery's SQLAlchemy backend on the same PostgreSQL (psycopg 3).

For each, one ``celery worker`` subprocess (threads pool, 4) and, in this process:

* ``get()`` latency after the task ended: each task returns ``time.time()`` as its last
  act, the caller's ``get()`` returns, the difference is the latency (sequential; after a
  warm-up); p50 and p99;
* chord of 100 (and ``--chord-big``, default 1,000): time from ``apply`` to the
  callback's result in ``get()`` (the SQLAlchemy backend runs ``celery.chord_unlock``,
  retried every second);
* waiting (``--waiters``, default 1,100,1000): that many threads in ``get()`` on results
  that never come, for ``--wait-seconds``; the CPU the result store's server spent
  meanwhile (PostgreSQL: the backends of this run's connections, found by their
  ``application_name``; Redis: the redis-server process), in ms per second (from
  /proc, in 10 ms ticks per process: coarse at these loads), and the statements the
  waiting process sent per second (alkstore's own count; SQLAlchemy's executions; Redis's
  GET/MGET calls, server-wide).

Needs PostgreSQL (``ALKSTORE_TEST_PG`` or postgresql://postgres@127.0.0.1:5432/test) and
Redis on 127.0.0.1:6379. Each run uses a fresh schema and drops it after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = {
    "alkstore": "alkstore://",
    "redis": "redis://127.0.0.1:6379/15",
    "db+postgresql": "db+postgresql+psycopg://{pg}",
}


def _backend_url(name: str) -> str:
    return BACKENDS[name].format(pg=_pg_url().split("://", 1)[1])


def _ticks(pids: list[int]) -> dict[int, int]:
    """utime + stime of each of ``pids`` still running (clock ticks)."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def _server_pids(name: str) -> list[int]:
    if name == "redis":
        out = subprocess.run(["pgrep", "-x", "redis-server"], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (os.environ.get("RB_APPNAME", "rbench"),),
        ).fetchall()
    return [r[0] for r in rows]


class Statements:
    """Statements the result backend's clients in this process send: alkstore's own
    count, SQLAlchemy's cursor executions, Redis's GET/MGET commands (server-wide)."""

    def __init__(self, app, name: str) -> None:
        self.app, self.name, self._sqla = app, name, [0]
        if name == "db+postgresql":
            from sqlalchemy import event
            from sqlalchemy.engine import Engine

            def count(*_: object) -> None:
                self._sqla[0] += 1

            event.listen(Engine, "before_cursor_execute", count)

    def total(self) -> int:
        if self.name == "alkstore":
            return sum(self.app.backend.tables.statements.values())
        if self.name == "db+postgresql":
            return self._sqla[0]
        import redis

        stats = redis.Redis(port=6379).info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("get", "mget"))


def waiting(app, name: str, count: int, seconds: float) -> tuple[float, float]:
    """Server CPU (ms/s) and the backend's statements per second while ``count`` threads
    wait in get() on results never stored."""
    import threading

    from celery.exceptions import TimeoutError as CeleryTimeout
    from celery.result import AsyncResult

    started = threading.Barrier(count + 1)

    def wait() -> None:
        r = AsyncResult(uuid.uuid4().hex, app=app)
        started.wait(60)
        with contextlib.suppress(CeleryTimeout):
            r.get(timeout=seconds + 3)

    threads = [threading.Thread(target=wait, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    started.wait(60)
    time.sleep(2.0)  # every thread is in get() (a first read each, for the pollers)
    statements = Statements(app, name) if not hasattr(app, "_rb_statements") else None
    statements = app.__dict__.setdefault("_rb_statements", statements)
    t0, c0, s0 = time.monotonic(), _ticks(_server_pids(name)), statements.total()
    time.sleep(seconds - 1.0)
    t1, c1, s1 = time.monotonic(), _ticks(_server_pids(name)), statements.total()
    for t in threads:
        t.join(seconds + 30)
    # A server process that started meanwhile counts whole; one that ended is not seen.
    used = sum(ticks - c0.get(pid, 0) for pid, ticks in c1.items())
    return used / os.sysconf("SC_CLK_TCK") * 1000 / (t1 - t0), (s1 - s0) / (t1 - t0)


def _pg_url() -> str:
    """This run's PostgreSQL URL: its connections are named ``RB_APPNAME``."""
    name = os.environ.get("RB_APPNAME", "rbench")
    return f"{PG}{'&' if '?' in PG else '?'}application_name={name}"


def make_app():
    """The benchmark's app, configured from the environment (also the worker's, with
    ``celery -A benchmarks.results``)."""
    from celery import Celery

    import kombu_alkstore  # noqa: F401

    schema = os.environ.get("RB_SCHEMA", "rbench")
    app = Celery(
        "rbench",
        broker="alkstore+" + _pg_url(),
        backend=os.environ.get("RB_BACKEND", "alkstore://"),
        set_as_current=False,
    )
    app.conf.update(
        broker_transport_options={"schema": schema, "polling_interval": 1.0},
        result_backend_transport_options={"schema": schema},
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=4,
        database_table_schemas={"task": schema, "group": schema},
    )

    @app.task(name="rb.stamp", shared=False)
    def stamp():
        return time.time()

    @app.task(name="rb.add", shared=False)
    def add(x, y):
        return x + y

    @app.task(name="rb.total", shared=False)
    def total(values):
        return sum(values)

    return app


if os.environ.get("RB_WORKER"):
    app = make_app()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_one(
    name: str, samples: int, chord_big: int, waiters: list[int], wait_seconds: float
) -> dict[str, float]:
    from celery import chord

    schema = f"rb_{uuid.uuid4().hex[:8]}"
    os.environ["RB_APPNAME"] = f"rbench_{schema}"
    env = dict(os.environ, RB_SCHEMA=schema, RB_BACKEND=_backend_url(name), RB_WORKER="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    os.environ.update(RB_SCHEMA=schema, RB_BACKEND=_backend_url(name))
    if name == "db+postgresql":
        import psycopg

        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    app = make_app()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchmarks.results",
            "worker",
            "-P",
            "threads",
            "-c",
            "4",
            "--loglevel=WARNING",
        ],
        env=env,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, float] = {}
    try:
        stamp, add, total = app.tasks["rb.stamp"], app.tasks["rb.add"], app.tasks["rb.total"]
        stamp.delay().get(timeout=120)  # the worker is up
        for _ in range(20):
            stamp.delay().get(timeout=60)
        lat = []
        for _ in range(samples):
            ended = stamp.delay().get(timeout=60)
            lat.append(time.time() - ended)
        out["get_p50_ms"] = _pct(lat, 0.5) * 1000
        out["get_p99_ms"] = _pct(lat, 0.99) * 1000
        for size in (100, chord_big):
            t0 = time.time()
            res = chord(add.s(i, i) for i in range(size))(total.s())
            assert res.get(timeout=600) == sum(i * 2 for i in range(size))
            out[f"chord_{size}_s"] = time.time() - t0
        for count in waiters:
            cpu, rate = waiting(app, name, count, wait_seconds)
            out[f"wait_{count}_cpu_ms_per_s"] = cpu
            out[f"wait_{count}_statements_per_s"] = rate
    finally:
        os.killpg(worker.pid, 9)
        worker.wait(10)
        app.close()
        import psycopg

        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            if name == "db+postgresql":
                conn.execute("DROP TABLE IF EXISTS celery_taskmeta, celery_tasksetmeta")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--chord-big", type=int, default=1000)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--waiters", default="1,100,1000")
    parser.add_argument("--wait-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    waiters = [int(n) for n in args.waiters.split(",") if n]
    rows = []
    for name in args.backends.split(","):
        result = run_one(name, args.samples, args.chord_big, waiters, args.wait_seconds)
        rows.append((name, result))
        print(name, {k: round(v, 3) for k, v in result.items()}, flush=True)
    keys = list(rows[0][1])
    print("\n| backend | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, result in rows:
        print(f"| {name} | " + " | ".join(f"{result[k]:.3g}" for k in keys) + " |")


if __name__ == "__main__":
    main()
