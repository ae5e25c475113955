"""SQLite statements run on every claim, wake or maintenance round whose walk does not
grow with a queue's backlog: each once read every due (or queued) job to drop them all
by a filter after the walk, or walked the table in rowid order.

A SQLite file per test; counted, not timed: the virtual machine instructions of the
store's own statement (``sqlite3``'s progress handler), run on a connection of our own
and rolled back.
"""

from __future__ import annotations

import time

import pytest

from kombu_alkstore.store import NewJob
from tests.helpers import delay, sqlite_steps, throttle


def test_a_limited_sqlite_claim_runs_as_many_steps_with_20000_due_as_with_1000(sqlite_target):
    """The claim of a queue with a limit picks the other queues' jobs with the limited
    queues left out of its walk: a filter after the walk read every due job of the
    limited queue, to drop them all (135,258 steps with 1,000 due, 382,258 with 20,000)."""
    with sqlite_target.open() as store:
        store.set_rate("q", "1000000/h")
        store.enqueue_many([NewJob("q", b"{}") for _ in range(1_000)])
        few = sqlite_steps(store, ("claim_pick_limited",))
        store.enqueue_many([NewJob("q", b"{}") for _ in range(19_000)])
        many = sqlite_steps(store, ("claim_pick_limited",))
        assert many <= few + 50, (few, many)
        assert len(store.claim(["q"], 10)) == 10


def test_a_sqlite_claim_probe_of_a_throttled_queue_runs_as_many_steps_with_10000_due(
    sqlite_target,
):
    """The read before a claim (claim_probe) leaves a queue its rate throttles out of its
    walk: a filter after the walk read every due job of it, to find nothing (12,420
    steps with 1,000 due, 120,420 with 10,000), on every wake of a worker."""
    with sqlite_target.open() as store:
        store.set_rate("q", "1/h")
        store.enqueue_many([NewJob("q", b"{}") for _ in range(1_000)])
        assert len(store.claim(["q"], 10)) == 1
        assert store.claim(["q"], 10) == []  # throttled until the hour is over
        few = sqlite_steps(store, ("claim_probe",))
        store.enqueue_many([NewJob("q", b"{}") for _ in range(9_000)])
        many = sqlite_steps(store, ("claim_probe",))
        assert many <= few + 50, (few, many)
        assert not store.has_due(["q"])


def test_the_lapsed_claims_round_runs_as_many_steps_with_20000_queued_as_with_1000(
    sqlite_target,
):
    """Maintenance's "lapsed" job (every round, under the write lock) finds the spent
    lapsed claims among the claims in flight: ordered by id, it walked the whole table
    in rowid order (60,056 steps a statement with 20,000 queued)."""
    with sqlite_target.open() as store:
        store.enqueue_many([NewJob("q", b"{}") for _ in range(1_000)])
        assert len(store.claim(["q"], 10)) == 10
        names = ("lapsed_bury", "lapsed_delete")
        few = sqlite_steps(store, names, batch=1000)
        store.enqueue_many([NewJob("q", b"{}") for _ in range(19_000)])
        many = sqlite_steps(store, names, batch=1000)
        assert many <= few + 50, (few, many)


def test_a_claim_with_few_due_runs_as_many_steps_with_20000_delayed_as_with_1000(
    sqlite_target,
):
    """The read before a claim and the claim's pick walk each priority's due jobs only
    (bands): over the whole queue they read every delayed (ETA) job whenever fewer were
    due than they looked for (100,427 and 120,586 steps with 5 due and 20,000 delayed),
    on every wake of a worker. The jobs due are still claimed in order."""
    with sqlite_target.open() as store:
        store.enqueue_many([NewJob("q", b"later", delay=3600.0) for _ in range(1_000)])
        store.enqueue_many([NewJob("q", b"low", priority=0) for _ in range(3)])
        store.enqueue_many([NewJob("q", b"high", priority=9) for _ in range(2)])
        names = ("claim_probe", "claim_pick")
        few = sqlite_steps(store, names)
        for _ in range(19):
            store.enqueue_many([NewJob("q", b"later", delay=3600.0) for _ in range(1_000)])
        many = sqlite_steps(store, names)
        assert many <= few + 50, (few, many)
        got = store.claim(["q"], 10)
        assert [d.body for d in got] == [b"high"] * 2 + [b"low"] * 3


def test_the_next_due_time_of_a_throttled_sqlite_queue_runs_as_many_steps_beside_delayed_jobs(
    sqlite_target,
):
    """next_due of a queue its rate throttles looks for each priority's first job not
    yet due by one seek; before, it read the minimum run_at of every delayed job."""
    with sqlite_target.open() as store:
        throttle(store)
        first = time.time() + 1800  # before the rate's wait is over
        delay(store, "q", first + 200, 2)  # one of each priority
        few = sqlite_steps(store, ("next_due",))
        delay(store, "q", first, 20_000)
        many = sqlite_steps(store, ("next_due",))
        assert many <= few + 50, (few, many)
        assert store.next_due(["q"]) == pytest.approx(first)
