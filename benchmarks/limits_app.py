"""The Celery app of ``benchmarks/limits_drain.py`` (``celery -A benchmarks.limits_app``),
configured from the environment: ``ALKSTORE_BENCH_BROKER``, ``ALKSTORE_BENCH_SCHEMA``."""

from __future__ import annotations

import os
import time

from celery import Celery

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)

app = Celery("limits_bench", broker=os.environ.get("ALKSTORE_BENCH_BROKER"), backend=None)
app.conf.update(
    broker_transport_options={"schema": os.environ.get("ALKSTORE_BENCH_SCHEMA", "alkstore")},
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.work", ignore_result=True)
def work(sleep: float = 0.0) -> None:
    """A task that sleeps ``sleep`` seconds (0: none)."""
    if sleep:
        time.sleep(sleep)
