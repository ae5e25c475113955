"""Dead letters: list, requeue, purge."""

from __future__ import annotations

from kombu_alkstore.store import NewJob, Store
from tests.store.conformance.helpers import claim_one


# ----------------------------------------------------------------------- dead letters
def _kill(store: Store, queue: str, n: int, error: str = "boom") -> list[int]:
    store.enqueue_many([NewJob(queue, f"{queue}-{i}".encode()) for i in range(n)])
    ds = store.claim([queue], n)
    assert store.fail(ds, error) == {d.id for d in ds}
    return [d.id for d in ds]


def test_dead_list(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 1)
    everything = store.dead_list()
    assert {j.id for j in everything} == set(q1 + q2)
    assert all(j.state == "dead" and j.last_error == "boom" for j in everything)
    died = [j.died_at for j in everything]
    assert died == sorted(died, reverse=True)  # newest first
    assert everything[0].id == q2[0]
    assert {j.id for j in store.dead_list("q1")} == set(q1)
    assert len(store.dead_list(limit=2)) == 2
    assert store.dead_list("nope") == []


def test_dead_requeue_by_ids_and_by_queue(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 2)
    assert store.dead_requeue(ids=[q1[0]]) == 1
    job = store.get_job(q1[0])
    assert (job.state, job.attempts, job.body) == ("pending", 0, b"q1-0")
    d = claim_one(store, "q1")
    assert (d.id, d.attempts) == (q1[0], 1)  # keeps its own id, fresh budget
    assert store.dead_requeue(queue="q2") == 2
    assert {x.id for x in store.claim(["q2"], 10)} == set(q2)
    assert store.dead_requeue(ids=[q1[1]], queue="q2") == 0  # both filters apply
    assert store.dead_requeue(ids=[987654321]) == 0
    assert store.dead_requeue() == 2
    assert store.dead_list() == []


def test_dead_purge_by_ids_and_by_queue(store):
    q1 = _kill(store, "q1", 3)
    q2 = _kill(store, "q2", 2)
    assert store.dead_purge(ids=[q1[0]]) == 1
    assert store.get_job(q1[0]) is None
    assert store.dead_purge(queue="q1") == 2
    assert {j.id for j in store.dead_list()} == set(q2)
    assert store.dead_purge() == 2
    assert store.dead_list() == []
    assert store.dead_purge() == 0
