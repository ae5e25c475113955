"""Maintenance as named jobs: each job of MAINTENANCE_JOBS run alone by
``store.maintain(job)``, on one scene holding rows for every job, so each test checks
its job's MaintenanceResult, the rows it was meant to change, and that every other
job's rows are untouched."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import MAINTENANCE_JOBS, MaintenanceResult, Store
from tests.helpers import run_sql
from tests.store.conformance.helpers import VT, claim_one

#: The store's dead-letter retention in the scene (seconds).
RETENTION = 0.8
#: How long after its start the scene is looked at: past every short expiry and deadline.
SETTLE = 1.5


@dataclass
class Scene:
    store: Store
    #: Labelled jobs (live or dead) by id.
    ids: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> dict:
        """Everything any job could change, readable through the interface."""
        s = self.store
        jobs = {}
        for label, jid in self.ids.items():
            job = s.get_job(jid)
            jobs[label] = None if job is None else (job.state, job.last_error)
        return {
            "jobs": jobs,
            "queues": {q: s.queue_exists(q) for q in ("gone", "fresh", "events", "longdead")},
            "bindings": sorted(s.bindings("ex")),
            "routing_version": s.routing_version(),
            "offers": {c.queue: c.offers for c in s.claim_stats() if c.offers},
        }


@pytest.fixture
def scene(opener, target):
    """Rows for every maintenance job, some due for it and some not, past their short
    expiries and deadlines (the seeding takes well under SETTLE seconds)."""
    store = opener(queue_expiry_grace=0, dead_letter_retention=RETENTION)
    sc = Scene(store)
    ids = sc.ids
    closing: list = []
    t0 = time.time()

    # expire: a pending expired job of a task queue (dead-lettered), one of a transient
    # queue (dropped), and a running claim that expires while it runs (left to finish).
    store.queue_declare("events", message_ttl=60)
    ids["expired"] = store.enqueue("tasks", b"e", expires_at=t0 - 1, msg_id="exp")
    ids["expired_transient"] = store.enqueue("events", b"t", expires_at=t0 - 1)
    ids["running_past_expiry"] = store.enqueue(
        "running", b"r", expires_at=t0 + 0.8, visibility_timeout=60
    )
    claim_one(store, "running")
    ids["not_expired"] = store.enqueue("tasks", b"k", expires_at=t0 + 3600)

    # lapsed: lapsed claims with attempts spent (dead-lettered) or left, and a live one.
    ids["lapsed_spent"] = store.enqueue("spent", b"s", max_attempts=1, visibility_timeout=VT)
    claim_one(store, "spent")
    ids["lapsed_left"] = store.enqueue("left", b"l", max_attempts=3, visibility_timeout=VT)
    claim_one(store, "left")
    ids["live_claim"] = store.enqueue("live", b"v", max_attempts=1, visibility_timeout=60)
    claim_one(store, "live")

    # retention: dead letters old enough for the store's retention; one of a queue whose
    # own retention is longer (kept).
    ids["dead_old"] = store.enqueue("dl", b"d")
    store.fail([claim_one(store, "dl")], "boom")
    store.queue_declare("longdead")
    queues = store.tables.qualified(store.tables.queues)
    run_sql(target, f"UPDATE {queues} SET dead_letter_retention = 3600 WHERE name = 'longdead'")
    ids["dead_kept_by_queue"] = store.enqueue("longdead", b"d")
    store.fail([claim_one(store, "longdead")], "boom")

    # expired_queues: an x-expires queue left unused past its expiry, with a binding and
    # a job; a fresh one.
    store.exchange_declare("ex", "direct")
    for name, expires in (("gone", 0.2), ("fresh", 60)):
        store.queue_declare(name, expires=expires)
        store.bind("ex", name, name)
        ids[f"{name}_job"] = store.enqueue(name, b"q")

    # dead_offers: the offer of a waiter that closed, and a live waiter's.
    if store.capabilities.handoff:
        session = store.session()
        live, dead = store.waiter(), store.waiter()
        closing += [session, live]
        session.register(dead.address, 1, ["offer_dead"], 1, lambda _: None)
        session.register(live.address, 1, ["offer_live"], 1, lambda _: None)
        session.wait()
        dead.close()

    assert time.time() < t0 + SETTLE - 0.1, "seeding too slow for the scene's timings"
    time.sleep(max(0.0, t0 + SETTLE - time.time()))
    ids["dead_young"] = store.enqueue("dl", b"y")
    store.fail([claim_one(store, "dl")], "boom")
    yield sc
    for c in closing:
        c.close()


def _run(scene: Scene, job: str) -> tuple[MaintenanceResult, dict, dict]:
    """Run ``job`` alone: its result, the snapshot before and the snapshot after."""
    before = scene.snapshot()
    result = scene.store.maintain(job)
    return result, before, scene.snapshot()


def _idempotent(scene: Scene, job: str) -> None:
    again = scene.store.maintain(job)
    assert (again.count, again.dropped, again.queues) == (0, 0, ()), again


def test_every_job_has_its_test_here():
    assert set(MAINTENANCE_JOBS) == {
        "expire",
        "lapsed",
        "retention",
        "dead_offers",
        "expired_queues",
    }


def test_expire(scene):
    result, before, after = _run(scene, "expire")
    assert result == MaintenanceResult("expire", count=1, dropped=1)
    before["jobs"]["expired"] = ("dead", "expired")
    before["jobs"]["expired_transient"] = None  # a transient queue drops it
    assert after == before  # the running claim past its expiry is left to finish
    assert scene.store.get_job("exp").state == "dead"
    _idempotent(scene, "expire")


def test_lapsed(scene):
    result, before, after = _run(scene, "lapsed")
    assert result == MaintenanceResult("lapsed", count=1)
    before["jobs"]["lapsed_spent"] = ("dead", "attempts exhausted")
    assert after == before  # attempts left, or a live claim: still processing
    assert after["jobs"]["lapsed_left"] == ("processing", None)
    assert after["jobs"]["live_claim"] == ("processing", None)
    _idempotent(scene, "lapsed")


def test_retention(scene):
    result, before, after = _run(scene, "retention")
    assert result == MaintenanceResult("retention", count=1)
    before["jobs"]["dead_old"] = None
    assert after == before  # the young one, and the queue with a longer retention, kept
    assert after["jobs"]["dead_kept_by_queue"] == ("dead", "boom")
    assert after["jobs"]["dead_young"] == ("dead", "boom")
    _idempotent(scene, "retention")


def test_dead_offers(scene):
    store = scene.store
    if not store.capabilities.handoff:
        pytest.skip(f"{store.engine} has no handoff")
    result, before, after = _run(scene, "dead_offers")
    assert before["offers"] == {"offer_dead": 1, "offer_live": 1}
    assert result == MaintenanceResult("dead_offers", count=1)
    before["offers"] = {"offer_live": 1}  # the live waiter's offer is kept
    assert after == before
    _idempotent(scene, "dead_offers")


def test_dead_offers_without_handoff_changes_nothing(scene):
    store = scene.store
    if store.capabilities.handoff:
        pytest.skip(f"{store.engine} has handoff")
    result, before, after = _run(scene, "dead_offers")
    assert result == MaintenanceResult("dead_offers", count=0)
    assert after == before


def test_expired_queues(scene):
    result, before, after = _run(scene, "expired_queues")
    assert result == MaintenanceResult("expired_queues", count=1, queues=("gone",))
    assert after["routing_version"] != before["routing_version"]  # its binding went
    before["routing_version"] = after["routing_version"]
    before["queues"]["gone"] = False
    before["bindings"] = [("fresh", "fresh")]
    before["jobs"]["gone_job"] = None
    assert after == before  # the fresh queue, its binding and job kept
    assert scene.store.claim(["gone"], 10) == []
    _idempotent(scene, "expired_queues")


def test_a_round_runs_every_job_once(scene):
    """maintain_round: the five jobs' results in order, with each job's effects, and
    nothing left for any job afterwards."""
    store = scene.store
    before = scene.snapshot()
    results = store.maintain_round()
    offers = 1 if store.capabilities.handoff else 0
    assert results == [
        MaintenanceResult("expire", count=1, dropped=1),
        MaintenanceResult("lapsed", count=1),
        MaintenanceResult("retention", count=1),
        MaintenanceResult("dead_offers", count=offers),
        MaintenanceResult("expired_queues", count=1, queues=("gone",)),
    ]
    after = scene.snapshot()
    before["jobs"].update(
        expired=("dead", "expired"),
        expired_transient=None,
        lapsed_spent=("dead", "attempts exhausted"),
        dead_old=None,
        gone_job=None,
    )
    before["queues"]["gone"] = False
    before["bindings"] = [("fresh", "fresh")]
    before["routing_version"] = after["routing_version"]
    before["offers"].pop("offer_dead", None)
    assert after == before
    for job in MAINTENANCE_JOBS:
        _idempotent(scene, job)


def test_an_unknown_job_is_refused(store):
    with pytest.raises(ConfigurationError, match="unknown maintenance job 'vacuum'"):
        store.maintain("vacuum")


BATCH = 5


def test_each_run_deletes_at_most_a_batch_and_says_when_there_may_be_more(opener):
    """``maintenance_batch`` bounds every run of a job (12 expired jobs, batch 5: 5, 5,
    then 2 and no more), and a round finishes the job in runs of its own."""
    store = opener(maintenance_batch=BATCH)
    t0 = time.time()
    for i in range(12):
        store.enqueue("tasks", b"e", expires_at=t0 - 1, msg_id=f"exp-{i}")
    runs = [store.maintain("expire") for _ in range(3)]
    assert [(r.count, r.more) for r in runs] == [(5, True), (5, True), (2, False)]
    assert [c.dead for c in store.counts(["tasks"])] == [12]


def test_a_round_runs_a_full_job_again_until_done(opener):
    store = opener(maintenance_batch=BATCH, dead_letter_retention=0.1)
    t0 = time.time()
    for i in range(12):
        store.enqueue("tasks", b"e", expires_at=t0 - 1, msg_id=f"exp-{i}")
    [expire] = [r for r in store.maintain_until_done() if r.job == "expire"]
    assert (expire.count, expire.more) == (12, False)
    time.sleep(0.2)
    [retention] = [r for r in store.maintain_until_done() if r.job == "retention"]
    assert (retention.count, retention.more) == (12, False)
    assert store.dead_list("tasks") == []


def test_maintenance_batch_must_be_a_positive_integer(opener):
    for bad in (0, -1, 2.5):
        with pytest.raises(
            ConfigurationError, match="option maintenance_batch (must be|has a bad)"
        ):
            opener(maintenance_batch=bad)
