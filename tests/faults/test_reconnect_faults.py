"""Faults the soak found around a lost database connection (a private PostgreSQL cluster)."""

from __future__ import annotations

import time

import pytest
from kombu import Connection
from kombu.exceptions import OperationalError

import kombu_alkstore  # noqa: F401
from kombu_alkstore.errors import StoreUnavailable
from tests.helpers import cluster_app, make_app, read_record, wait_for, worker_process
from tests.private_pg import private_cluster


def _keys(record) -> list[str]:
    return sorted(r[0] for r in read_record(record))


@pytest.mark.timeout(120)
def test_tasks_running_across_a_server_restart_complete(tmp_path):
    """Tasks running (acks_late) while the server restarts: each completes at least once,
    and the worker goes on. A rerun is allowed (at-least-once, as AMQP redelivers unacked
    messages on a lost connection); a lost or stranded task is not."""
    record = tmp_path / "record.tsv"
    with private_cluster() as cluster:
        target, opts, app, env = cluster_app(cluster, ALKSTORE_TEST_ACKS_LATE="1")
        with worker_process(
            target, record, "-c", "2", "-P", "prefork", log=tmp_path / "w.log", **env
        ):
            app.send_task("tests.apps.proj.mark", ("warm",))
            wait_for(lambda: len(read_record(record)) == 1, 40)
            for i in range(2):
                app.send_task("tests.apps.proj.mark", (f"long{i}", 4.0))
            time.sleep(1.5)  # both tasks are running in the pool
            cluster.stop("fast")
            time.sleep(1.0)
            cluster.start()
            app = make_app(target, transport_options=opts)
            app.send_task("tests.apps.proj.mark", ("after",))
            wanted = {"after", "long0", "long1", "warm"}
            wait_for(lambda: set(_keys(record)) >= wanted, 60, interval=0.5)
            # Every ack lands while the worker lives (acks go out in batches, so one made
            # just before a kill -9 would only be delivered again after its timeout).
            with target.open() as store:
                wait_for(lambda: store.counts(["celery"])[0].processing == 0, 10)
                assert store.dead_list() == []


@pytest.mark.timeout(120)
@pytest.mark.xfail(
    strict=True,
    reason="known gap: after a lost connection the prefetched (not started) messages are "
    "not handed back at once (tasks running under acks_late share the same unacked set and "
    "must not be rerun early); their claims are no longer heartbeated and lapse after one "
    "visibility timeout (300 s by default), so they run late, not never",
)
def test_prefetched_messages_are_not_stranded_by_a_lost_connection(tmp_path):
    record = tmp_path / "record.tsv"
    with private_cluster() as cluster:
        target, opts, app, env = cluster_app(cluster, ALKSTORE_TEST_ACKS_LATE="1")
        with worker_process(target, record, "-c", "1", "-P", "prefork", **env):
            app.send_task("tests.apps.proj.mark", ("warm",))
            wait_for(lambda: len(read_record(record)) == 1, 40)
            # One slot: 'long' runs, the short ones wait in the worker's prefetch.
            app.send_task("tests.apps.proj.mark", ("long", 5.0))
            for i in range(3):
                app.send_task("tests.apps.proj.mark", (f"short{i}",))
            time.sleep(1.5)
            assert cluster.terminate_backends() > 0
            wanted = {"warm", "long", "short0", "short1", "short2"}
            # Well within the default visibility timeout (300 s): nothing may wait for it.
            wait_for(lambda: set(_keys(record)) >= wanted, 25, interval=0.5)


@pytest.mark.timeout(120)
def test_ensure_connection_fails_while_the_database_is_down():
    with private_cluster() as cluster:
        url = f"alkstore+{cluster.url}"
        opts = {"schema": "alk"}
        with Connection(url, transport_options=opts) as first:
            first.connect()  # the process-wide store is open
            cluster.stop("fast")
            try:
                started = time.monotonic()
                with (
                    pytest.raises((OperationalError, StoreUnavailable)),
                    Connection(url, transport_options=opts) as second,
                ):
                    second.ensure_connection(max_retries=1, interval_start=0.1, interval_step=0.1)
                assert time.monotonic() - started < 20
            finally:
                cluster.start()
