"""Connections per worker host: how many PostgreSQL connections kombu-alkstore holds.

    python benchmarks/connections.py [--tasks 400]

On a private cluster (its own pg_stat_activity), for each case: a ``celery worker``
(prefork 8, prefork 16, threads 16) whose tasks publish (``relay`` tasks each calling
``mark.delay()`` 5 times), and a web-app-like process with 8 threads publishing. Prints
the most connections seen while busy (from the worker at rest: start-up's connections
closed), and, once idle, the count ``pool_max_idle`` + 5 s
after the work ended and the count it settles at (``--idle-wait`` seconds at most: the
store's pool closes one unused connection per ``pool_max_idle`` period), with when it got
there: every client connection of the private cluster but the counter's and the
measuring producer's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.helpers import kill_group, make_app, read_record, wait_for, worker_process  # noqa: E402
from tests.private_pg import private_cluster  # noqa: E402

WEB_APP = """
import json, os, sys, threading, time
sys.path.insert(0, {root!r})
from celery import Celery
import kombu_alkstore
app = Celery("web", broker=os.environ["ALKSTORE_TEST_BROKER"])
app.conf.broker_transport_options = json.loads(os.environ["ALKSTORE_TEST_OPTIONS"])
def work():
    for i in range({n}):
        app.send_task("tests.apps.proj.mark", (f"web-{{threading.get_ident()}}-{{i}}",))
        time.sleep(0.005)
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print("published", flush=True)
time.sleep(float(sys.argv[1]))
"""


def count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND application_name <> 'measurer'"
        ).fetchone()[0]


def sample(url: str, stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        seen.append(count(url))
        time.sleep(0.05)


def settle(url: str, first: float, limit: float) -> tuple[int, int, float]:
    """Sample every second for ``limit`` seconds: the count at ``first`` seconds, the
    last count, and the second from which it held."""
    start = time.monotonic()
    at_first = None
    last, since = count(url), 0.0
    while (elapsed := time.monotonic() - start) < limit:
        n = count(url)
        if n != last:
            last, since = n, elapsed
        if at_first is None and elapsed >= first:
            at_first = n
        time.sleep(1.0)
    return (last if at_first is None else at_first), last, since


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--idle-wait", type=float, default=90.0)
    args = parser.parse_args()
    from tests.conftest import Target

    with private_cluster() as cluster:
        target = Target("postgresql", cluster.url, "alk")
        target.open().close()
        opts = dict(target.transport_options, polling_interval=1.0)
        first = float(opts.get("pool_max_idle", 10.0)) + 5.0
        idle_after = max(args.idle_wait, first + 1.0)
        env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts)}
        # The measuring producer's own connections are named apart and not counted.
        measurer = Target("postgresql", cluster.url + "?application_name=measurer", "alk")
        app = make_app(measurer, transport_options=opts)
        rows = []
        for label, wargs in (
            ("prefork 8, tasks publish", ("-P", "prefork", "-c", "8")),
            ("prefork 16, tasks publish", ("-P", "prefork", "-c", "16")),
            ("threads 16, tasks publish", ("-P", "threads", "-c", "16")),
        ):
            record = Path(f"/tmp/alkstore-conn-{os.getpid()}.tsv")
            record.unlink(missing_ok=True)
            with worker_process(target, record, *wargs, **env):
                wait_for(lambda: app.control.inspect(timeout=1).ping(), 60, interval=0.5)
                # Start-up's pooled connections (and the one that answered the ping) are
                # closed after pool_max_idle: busy is measured from the worker at rest.
                with contextlib.suppress(AssertionError):
                    wait_for(lambda: count(cluster.url) <= 2, first + 30, interval=0.5)
                base = count(cluster.url)
                seen: list[int] = []
                stop = threading.Event()
                sampler = threading.Thread(target=sample, args=(cluster.url, stop, seen))
                sampler.start()
                for i in range(args.tasks // 5):
                    app.send_task("tests.apps.proj.relay", (f"r{i}", 5))
                wait_for(lambda r=record: len(read_record(r)) >= args.tasks, 300, interval=0.2)
                stop.set()
                sampler.join()
                app.close()  # the measuring producer's own connections go
                idle = settle(cluster.url, first, idle_after)
            rows.append((label, base, max(seen), idle))
            record.unlink(missing_ok=True)
        code = WEB_APP.format(root=str(ROOT), n=args.tasks // 8)
        penv = dict(os.environ, ALKSTORE_TEST_BROKER=target.broker_url, **env)
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(idle_after)],
            env=penv,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        seen = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample, args=(cluster.url, stop, seen))
        sampler.start()
        assert proc.stdout is not None
        proc.stdout.readline()
        stop.set()
        sampler.join()
        idle = settle(cluster.url, first, idle_after - 1)
        kill_group(proc)
        rows.append(("web app, 8 threads publishing", 0, max(seen), idle))
    print(
        f"{'case':32} {'idle at start':>13} {'busy (max)':>10} "
        f"{f'idle at {first:.0f} s':>12} {'settled at':>10} {'from (s)':>8}"
    )
    for label, base, busy, (at_first, settled, since) in rows:
        print(f"{label:32} {base:>13} {busy:>10} {at_first:>12} {settled:>10} {since:>8.0f}")


if __name__ == "__main__":
    main()
