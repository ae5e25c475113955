"""PostgreSQL reads whose walk does not grow with a queue's delayed jobs.

A job published with an ETA or a countdown, or retried later, waits in ``jobs`` with its
``run_at`` ahead. The claim index is ordered ``(queue, priority DESC, run_at, id)``, so
a read of the earliest such job is one seek per priority, where a read over the whole
queue takes in every delayed job.

Each statement runs on the store's own parameters, on a connection of our own, in a
transaction rolled back; counted, not timed: the blocks it reads from ``jobs`` and its
indexes, with 20,000 delayed jobs against none.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers import blocks_read, delay, throttle

DELAYED = 20_000


def read(store: Any, url: str, key: str, params: dict[str, Any]) -> int:
    """Blocks statement ``key`` reads from jobs with ``params`` (rolled back)."""
    with psycopg.connect(url) as conn:
        return blocks_read(conn, store.names["jobs"], store._sql[key], store._params(params))


def test_the_next_due_time_of_a_throttled_queue_reads_as_much_beside_20000_delayed_jobs(
    pg_target,
):
    """next_due of a queue its rate throttles looks for each priority's first job not
    yet due by one seek; before, it read the minimum run_at of every delayed job."""
    with pg_target.open() as store:
        throttle(store)
        params = store.probe_params(["q"])
        first = store.now() + 1800  # before the rate's wait is over
        delay(store, "q", first + 200, 2)  # one of each priority
        few = read(store, pg_target.url, "next_due", params)
        delay(store, "q", first, DELAYED)
        many = read(store, pg_target.url, "next_due", params)
        assert many <= few + 10, (few, many)
        assert store.next_due(["q"]) == pytest.approx(first)
