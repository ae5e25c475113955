"""Every worker pool Celery offers, as a ``celery worker`` subprocess on PostgreSQL.

For each pool (prefork, threads, solo, gevent, eventlet): the round trip; countdowns run
within about a second of their ETA with the default 10 s safety-net poll; a task longer
than its visibility timeout keeps its claim and is acked once (the heartbeat thread holds
it even where the task runs in the event loop's thread, and beats by the job's own
timeout, stamped by a producer configured shorter than the worker), and so do several
such tasks claimed in one batch, waiting behind each other; a worker killed with -9
loses nothing.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.helpers import kill_group, make_app, read_record, wait_for, worker_process

POOLS = ["prefork", "threads", "solo", "gevent", "eventlet"]
#: Slack allowed between a countdown's ETA and its start (wake-up, claim, pool start).
ETA_SLACK = 1.5


def _runs(record, prefix: str) -> list[list[str]]:
    return [row for row in read_record(record) if row[0].startswith(prefix)]


@pytest.mark.slow
@pytest.mark.parametrize("pool", POOLS)
def test_pool(pool, pg_target, tmp_path):
    pg_target.open().close()  # the tables, before the worker starts
    # The worker runs with the defaults (a 10 s safety-net poll a countdown must not wait
    # for; a 300 s visibility timeout). The producer stamps its jobs with 3 s: the worker
    # must heartbeat by each job's own timeout.
    worker_opts = dict(pg_target.transport_options)
    producer_opts = dict(pg_target.transport_options, visibility_timeout=3)
    app = make_app(pg_target, transport_options=producer_opts)
    app.conf.broker_transport_options = producer_opts
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(worker_opts), "ALKSTORE_TEST_ACKS_LATE": "1"}
    record = tmp_path / "record.tsv"
    args = ("-P", pool, "-c", "1" if pool == "solo" else "4", "-n", f"{pool}@%h")
    log = tmp_path / "worker.log"
    try:
        with worker_process(pg_target, record, *args, log=log, **env) as worker:
            # Round trip.
            app.send_task("tests.apps.proj.mark", ("hello",))
            wait_for(lambda: _runs(record, "hello"), 60, interval=0.1)

            # Countdowns 1.5-6 s, each on time.
            sent = time.time()
            etas = {f"eta{i}": sent + 1.5 + i * 0.5 for i in range(10)}
            for key, eta in etas.items():
                app.send_task("tests.apps.proj.mark", (key,), countdown=eta - sent)
            wait_for(lambda: len(_runs(record, "eta")) == 10, 30, interval=0.1)
            late = {
                row[0]: round(float(row[2]) - etas[row[0]], 2)
                for row in _runs(record, "eta")
                if not -0.05 <= float(row[2]) - etas[row[0]] <= ETA_SLACK
            }
            assert late == {}, f"countdowns not run within {ETA_SLACK} s of their ETA"
            lateness = [float(r[2]) - etas[r[0]] for r in _runs(record, "eta")]
            print(f"{pool}: countdown lateness max {max(lateness):.3f} s")

            # Longer than its visibility timeout (3 s): holds its claim, so its ack lands
            # (a lapsed claim refuses the ack and the task runs again).
            long = app.send_task("tests.apps.proj.mark", ("long", 7.5))
            wait_for(lambda: _runs(record, "long"), 30, interval=0.1)
            with pg_target.open() as store:
                wait_for(lambda: store.get_job(long.id) is None, 5, interval=0.1)
            print(f"{pool}: 7.5 s task with a 3 s timeout ran {len(_runs(record, 'long'))}x")

            # More such tasks than the pool runs at once, claimed in one batch: the ones
            # waiting behind (the loop blocked by an inline pool, solo; gevent and
            # eventlet once their slots are full) hold their claims too, and each runs
            # once (a lapsed one would be claimed and run again).
            n = 3 if pool == "solo" else 6
            batch = [app.send_task("tests.apps.proj.mark", (f"b{i}", 4.0)) for i in range(n)]
            wait_for(lambda: len(_runs(record, "b")) >= n, 60, interval=0.1)
            with pg_target.open() as store:  # acked, so every run is recorded by now
                wait_for(lambda: all(store.get_job(r.id) is None for r in batch), 40)
            runs = sorted(row[0] for row in _runs(record, "b"))
            assert runs == sorted(f"b{i}" for i in range(n)), f"{pool}: batch ran {runs}"

            # Killed with -9 mid-backlog: nothing is lost.
            for i in range(12):
                app.send_task("tests.apps.proj.mark", (f"k{i}", 0.3))
            wait_for(lambda: len(_runs(record, "k")) >= 2, 30, interval=0.05)
            kill_group(worker, signal.SIGKILL)
        with worker_process(pg_target, record, *args, log=log, **env):
            keys = {f"k{i}" for i in range(12)}
            wait_for(lambda: {r[0] for r in _runs(record, "k")} >= keys, 60)
        print(f"{pool}: after kill -9, {len({r[0] for r in _runs(record, 'k')})}/12 ran")
        with pg_target.open() as store:
            assert store.dead_list() == []
    except BaseException:
        print(log.read_text()[-6000:] if log.exists() else "(no worker log)")
        raise
