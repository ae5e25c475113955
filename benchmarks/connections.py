"""Connections per worker host: how many PostgreSQL connections kombu-alkstore holds.

    python benchmarks/connections.py [--tasks 400]

On a private cluster (its own pg_stat_activity), for each case: a ``celery worker``
(prefork 8, prefork 16, threads 16) whose tasks publish (``relay`` tasks each calling
``mark.delay()`` 5 times), and a web-app-like process with 8 threads publishing. Prints
the most connections seen while busy and the count once idle (after ``pool_max_idle``
and a margin): every client connection of the private cluster but the counter's and the
measuring producer's own.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--idle-wait", type=float, default=None)
    args = parser.parse_args()
    from tests.conftest import Target

    with private_cluster() as cluster:
        target = Target("postgresql", cluster.url, "alk")
        target.open().close()
        opts = dict(target.transport_options, polling_interval=1.0)
        idle_after = float(opts.get("pool_max_idle", 30.0)) + 5.0
        if args.idle_wait is not None:
            idle_after = args.idle_wait
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
                time.sleep(idle_after)
                idle = count(cluster.url)
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
        time.sleep(idle_after - 1)
        idle = count(cluster.url)
        kill_group(proc)
        rows.append(("web app, 8 threads publishing", 0, max(seen), idle))
    print(f"{'case':32} {'idle at start':>13} {'busy (max)':>10} {'idle after':>10}")
    for label, base, busy, idle in rows:
        print(f"{label:32} {base:>13} {busy:>10} {idle:>10}")


if __name__ == "__main__":
    main()
