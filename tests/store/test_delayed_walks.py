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

from kombu_alkstore.store import NewJob
from tests.helpers import blocks_read

DELAYED = 20_000


def delayed(store: Any, queue: str, ahead: float, count: int = DELAYED) -> float:
    """``count`` jobs of ``queue``, at two priorities, the first due ``ahead`` seconds
    from now (returned: its run_at), one a second after it."""
    later = store.now() + ahead
    store.enqueue_many(
        [NewJob(queue, b"{}", priority=n % 2, run_at=later + n) for n in range(count)]
    )
    return later


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
        store.set_rate("q", "1/h")
        store.enqueue_many([NewJob("q", b"{}", priority=n % 2) for n in range(4)])
        assert len(store.claim(["q"], 10)) == 1
        assert store.claim(["q"], 10) == []  # throttled until the hour is over
        params = store.probe_params(["q"])
        delayed(store, "q", ahead=2000, count=2)  # one of each priority
        few = read(store, pg_target.url, "next_due", params)
        first = delayed(store, "q", ahead=1800)  # before the rate's wait
        many = read(store, pg_target.url, "next_due", params)
        assert many <= few + 10, (few, many)
        assert store.next_due(["q"]) == pytest.approx(first)
