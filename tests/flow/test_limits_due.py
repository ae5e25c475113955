"""When a limited queue is due (issue 32), on both engines: ``has_due`` and ``next_due``
agree with what a claim would take, so a worker refused by a limit neither spins nor
sleeps through a lapse.

A queue at its limit, or whose due jobs (in the claim's scan window) are all of keys at
their limits, is not due now; its next due time is when its earliest live claim lapses
(a slot freed by a lapse is announced by nothing) or a delayed job falls due. Before,
``next_due`` gave the past run_at of the blocked jobs: an idle worker claimed about 200
times a second on a key at its limit (the second test; 672 and 776 claims in 3 s), and
it learnt no lapse time at all (tests/flow/test_limits_lapse.py).
"""

from __future__ import annotations

import json
import time

import pytest

from kombu_alkstore.transport.scheduling import ClaimScheduler
from tests.helpers import make_app, thread_worker

pytestmark = pytest.mark.timeout(120)


def body(key: str | None = None, n: int = 0) -> bytes:
    headers = {"id": f"t{n}"}
    if key is not None:
        headers["alkstore_limit_key"] = key
    return json.dumps({"body": "e30=", "headers": headers, "properties": {}}).encode()


def test_a_queue_at_its_limit_is_due_when_its_earliest_claim_lapses(target):
    with target.open() as store:
        for n in range(3):
            store.enqueue("q", body(n=n), visibility_timeout=30.0)
        store.set_limit("q", 1)
        [held] = store.claim(["q"], 5)
        assert not store.has_due(["q"])
        assert store.next_due(["q"]) == pytest.approx(held.deadline, abs=0.01)
        # other queues keep their own due times; the earliest wins
        store.enqueue("free", body(), run_at=store.now() + 10)
        assert store.next_due(["q", "free"]) == pytest.approx(store.now() + 10, abs=1)
        # the limit raised: due now
        store.set_limit("q", 2)
        assert store.has_due(["q"])
        assert store.next_due(["q"]) <= store.now()
        # a paused queue is never due
        store.pause_queue("q")
        assert store.next_due(["q"]) is None


def test_jobs_of_keys_at_their_limits_are_not_due(target):
    with target.open() as store:
        for n in range(3):
            store.enqueue("k", body("a", n), visibility_timeout=30.0)
        store.set_limit("k", 1, key="*")
        [held] = store.claim(["k"], 5)
        assert store.claim(["k"], 5) == []
        assert not store.has_due(["k"])
        assert store.next_due(["k"]) == pytest.approx(held.deadline, abs=0.01)
        # a delayed job (of a key with room) falls due before the lapse
        store.enqueue("k", body("b", 9), run_at=store.now() + 5)
        assert not store.has_due(["k"])
        assert store.next_due(["k"]) == pytest.approx(store.now() + 5, abs=1)
        # a due job of a key with room, or with no key: due now, and a claim takes it
        store.enqueue("k", body("c", 10))
        assert store.has_due(["k"])
        assert store.next_due(["k"]) <= store.now()
        assert [d.id for d in store.claim(["k"], 5)] != []
        store.enqueue("k", body(None, 11))
        assert store.has_due(["k"])


def test_an_idle_worker_does_not_spin_on_a_key_at_its_limit(target, monkeypatch):
    """A worker whose queue holds only jobs of a key at its limit claims again when a
    claim ends or lapses, not in a loop (before: about 200 claims a second)."""
    claims: list[float] = []

    def counted(name):
        original = getattr(ClaimScheduler, name)

        def wrapper(self, *args, **kwargs):
            claims.append(time.monotonic())
            return original(self, *args, **kwargs)

        monkeypatch.setattr(ClaimScheduler, name, wrapper)

    counted("request_claim")  # the claims session (PostgreSQL)
    counted("claim_now")  # blocking claims (SQLite)
    app = make_app(target, task_acks_late=True)

    @app.task(name="t.x", shared=False)
    def x():
        return None

    with target.open() as store:
        store.set_limit("celery", 1, key="*")
        for _ in range(3):
            x.apply_async(headers={"alkstore_limit_key": "a"})
        assert store.claim(["celery"], 1)  # the key's one slot, held here (300 s)
        with thread_worker(app, concurrency=2):
            time.sleep(1.0)
            before = len(claims)
            time.sleep(3.0)
            during = len(claims) - before
        assert store.counts(["celery"])[0].pending == 2
    assert during <= 3, f"{during} claims in 3 s"
