"""Constants and helpers shared by the conformance tests (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import os

from kombu_alkstore.store import Delivery, ScheduleRow, Store

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

#: Small enough to let a claim lapse in a test, large enough for a few statements.
VT = 0.3
#: Slack for clock reads around a statement (time.time() in Python vs the database).
EPS = 0.25


def claim_one(store: Store, queue: str = "q") -> Delivery:
    got = store.claim([queue], 1)
    assert len(got) == 1, got
    return got[0]


def forged(d: Delivery, **changes) -> Delivery:
    """A copy of a delivery with some fields changed (a wrong token, say)."""
    fields = {f: getattr(d, f) for f in Delivery.__slots__}
    fields.update(changes)
    return Delivery(**fields)


def total_jobs(store: Store, queue: str) -> int:
    (c,) = store.counts([queue])
    return c.pending + c.delayed + c.processing + c.dead


def _sched(name: str, interval: float, next_at: float, **kw) -> ScheduleRow:
    fields = dict(
        name=name,
        spec=f"@every {interval:g}s",
        interval=interval,
        task="proj.tasks.add",
        args="[1, 2]",
        kwargs="{}",
        options="{}",
        next_at=next_at,
        origin="config",
    )
    fields.update(kw)
    return ScheduleRow(**fields)


def keyed_body(key: str | None = None, n: int = 0) -> bytes:
    """A kombu-like envelope carrying the limit key header (or none)."""
    headers = {"id": f"t{n}"}
    if key is not None:
        headers["alkstore_limit_key"] = key
    return json.dumps({"body": "e30=", "headers": headers, "properties": {}}).encode()


def fill(store: Store, queue: str, count: int, key: str | None = None) -> None:
    """``count`` jobs in ``queue``, each with limit key ``key`` (or none)."""
    for n in range(count):
        store.enqueue(queue, keyed_body(key, n))
