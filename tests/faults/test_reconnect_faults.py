"""Faults the soak found around a lost database connection (a private PostgreSQL cluster)."""

from __future__ import annotations

import json
import time

import pytest
from kombu import Connection
from kombu.exceptions import OperationalError

import kombu_alkstore  # noqa: F401
from kombu_alkstore.errors import StoreUnavailable
from tests.conftest import Target
from tests.helpers import make_app, read_record, wait_for, worker_process
from tests.private_pg import private_cluster


@pytest.mark.timeout(120)
def test_task_running_across_a_server_restart_runs_once(tmp_path):
    record = tmp_path / "record.tsv"
    with private_cluster() as cluster:
        target = Target("postgresql", cluster.url, "alk")
        opts = dict(target.transport_options, polling_interval=1.0, max_attempts=1)
        app = make_app(target, transport_options=opts)
        env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_ACKS_LATE": "1"}
        with worker_process(target, record, "-c", "2", "-P", "prefork", **env):
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
            wait_for(lambda: any(r[0] == "after" for r in read_record(record)), 60)
            time.sleep(6)  # room for a redelivery to run
        keys = sorted(r[0] for r in read_record(record))
    # At-least-once allows a rerun; a claim that is still valid should not be given up.
    assert keys == ["after", "long0", "long1", "warm"], keys


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
