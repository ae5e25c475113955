"""A PostgreSQL restart: the worker reconnects and nothing committed is lost."""

from __future__ import annotations

import time

from tests.helpers import cluster_app, make_app, read_record, wait_for, worker_process
from tests.private_pg import private_cluster


def test_worker_reconnects_after_postgres_restart(tmp_path):
    record = tmp_path / "record.tsv"
    with private_cluster() as cluster:
        target, opts, app, env = cluster_app(cluster)
        with worker_process(target, record, "-c", "2", "-P", "prefork", **env):
            for i in range(5):
                app.send_task("tests.apps.proj.mark", (f"before{i}",))
            wait_for(lambda: len(read_record(record)) == 5, 40)

            cluster.stop("fast")  # kills every backend, including the worker's LISTEN
            time.sleep(2)
            cluster.start()
            app = make_app(target, transport_options=opts)
            for i in range(50):
                app.send_task("tests.apps.proj.mark", (f"after{i}",))
            wait_for(lambda: len(read_record(record)) == 55, 90, interval=0.5)
    keys = sorted(row[0] for row in read_record(record))
    assert keys == sorted([f"before{i}" for i in range(5)] + [f"after{i}" for i in range(50)])
