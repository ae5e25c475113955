"""Claim scheduling and the ack buffer without a database: the transport's parts driven
through a double of the claims interface (tests/transport/claims_double.py), so each
decision (when to claim, when to learn a due time, what one ack flush sends) is seen
directly."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from kombu_alkstore.transport.ackbuffer import AckBuffer
from kombu_alkstore.transport.link import Link
from kombu_alkstore.transport.scheduling import ClaimScheduler
from tests.transport.claims_double import FakeLoop, RecordingClaims

NOW = 1_000_000.0
BATCH = 10


class Lost(Exception):
    """A lost connection, as the store reports it."""


class FakeChannel:
    """What the scheduler reads of a kombu channel, and what it delivers to one."""

    def __init__(self, *queues: str) -> None:
        self._consumers = {"tag"}
        self._active_queues = set(queues)
        self._no_ack_queues: set[str] = set()
        self.claiming = False
        self.claim_again = False
        self.closed = False
        self.connection = object()
        self.qos = SimpleNamespace(can_consume=lambda: True)
        self.delivered: list = []

    def wants_batch(self) -> bool:
        return True

    def batch_size(self) -> int:
        return BATCH

    def deliver(self, deliveries, at_most=None) -> None:
        self.delivered += deliveries


class FakeStore:
    connection_errors = (Lost,)
    capabilities = SimpleNamespace(listener=True)

    def __init__(self) -> None:
        self.clock = NOW
        self.acked: list = []

    def now(self) -> float:
        return self.clock

    def ack(self, deliveries) -> set[int]:
        """A blocking ack on a pooled connection (what another thread's acks use)."""
        self.acked += deliveries
        return {d.id for d in deliveries}


def _link(*channels: FakeChannel) -> Link:
    """A connection's link in this thread's event loop, its claims session the double."""
    link = Link(list(channels), (Lost,))
    link.store = FakeStore()
    link.claims = RecordingClaims()
    link.attach(FakeLoop())
    return link


def _plan(link: Link) -> ClaimScheduler:
    handoff = SimpleNamespace(
        behind=lambda ch: None, before_claim=lambda ch: None, claimed=lambda ch, full: None
    )
    return ClaimScheduler(link, handoff)


def _claims(link: Link) -> int:
    return link.claims.ops().count("claim")


def _job(i: int, queue: str = "q"):
    return SimpleNamespace(id=i, queue=queue, visibility_timeout=30.0, deadline=NOW + 30)


def test_a_due_time_learnt_sets_one_timer_that_claims_then_learns_the_next():
    ch = FakeChannel("q", "r")
    link = _link(ch)
    plan = _plan(link)
    plan.learn_next_due()
    assert [(s.op, s.args) for s in link.claims.sent] == [("next_due", (("q", "r"),))]
    link.claims.answer("next_due", NOW + 30)
    [(delay, _)] = link.loop.later
    assert delay == pytest.approx(30.001)
    plan.learn_next_due()
    link.claims.answer("next_due", NOW + 40)  # a later one: the earlier timer stands
    assert len(link.loop.later) == 1
    link.store.clock = NOW + 30
    link.loop.fire()
    assert link.claims.ops() == ["claim", "next_due"]  # it fell due: claimed, next asked


def test_a_due_time_past_while_a_claim_is_in_flight_is_learnt_after_its_answer():
    ch = FakeChannel("q")
    link = _link(ch)
    plan = _plan(link)
    plan.request_claim(ch, link.claims)
    plan.learn_next_due()
    link.claims.answer("next_due", NOW - 1)  # due already; the claim in flight may take it
    assert link.loop.later == [] and link.claims.ops() == ["claim"]
    link.claims.answer("claim", [], False)  # the claim was answered, no backlog
    assert link.claims.ops() == ["next_due"]


def test_the_safety_poll_claims_only_when_the_store_says_work_is_due():
    ch = FakeChannel("q")
    link = _link(ch)
    plan = _plan(link)
    plan.safety_poll()
    link.claims.answer("has_due", False)
    assert _claims(link) == 0
    plan.safety_poll()
    link.claims.answer("has_due", True)
    assert _claims(link) == 1


def test_an_answer_after_a_lost_connection_is_not_acted_on():
    ch = FakeChannel("q")
    link = _link(ch)
    plan = _plan(link)
    plan.safety_poll()
    link.claims.answer("has_due", Lost("gone"))  # the claims in flight report it
    plan.learn_next_due()
    link.claims.answer("next_due", Lost("gone"))
    assert _claims(link) == 0 and link.loop.later == []
    plan.learn_next_due()
    with pytest.raises(ValueError):  # any other error is raised, not swallowed
        link.claims.answer("next_due", ValueError("bad row"))


def test_a_full_batch_leaves_the_channel_to_claim_again_on_the_next_tick():
    ch = FakeChannel("q")
    link = _link(ch)
    plan = _plan(link)
    plan.request_claim(ch, link.claims)
    link.claims.answer("claim", [_job(i) for i in range(BATCH)], False)
    assert len(ch.delivered) == BATCH
    plan.claim_starved()
    assert _claims(link) == 1  # claimed again: more may wait
    link.claims.answer("claim", [_job(99)], False)
    plan.claim_starved()
    assert _claims(link) == 0  # no backlog left: nothing more to claim


def test_one_claim_in_flight_per_channel_and_a_wakeup_meanwhile_claims_again():
    ch = FakeChannel("q")
    link = _link(ch)
    plan = _plan(link)
    plan.request_claim(ch, link.claims)
    plan.request_claim(ch, link.claims)  # a wake-up while the first is in flight
    assert _claims(link) == 1
    link.claims.answer("claim", [_job(1)], False)
    plan.claim_starved()  # the job that woke it may have missed the first claim
    assert _claims(link) == 1


def test_jobs_claimed_for_a_consumer_cancelled_meanwhile_are_handed_back():
    ch = FakeChannel("q", "r")
    link = _link(ch)
    plan = _plan(link)
    plan.request_claim(ch, link.claims)
    ch._active_queues = {"r"}  # the consumer of q went while the claim was in flight
    link.claims.answer("claim", [_job(1, "q"), _job(2, "r")], False)
    assert [d.id for d in ch.delivered] == [2]
    [release] = [s for s in link.claims.sent if s.op == "release"]
    assert [d.id for d in release.args[0]] == [1]


def _delivery(i: int):
    return SimpleNamespace(id=i, queue="q", visibility_timeout=30.0, attempts=1, max_attempts=3)


def test_acks_in_the_loop_thread_go_in_one_statement_per_flush(caplog):
    t = _link()
    acks = AckBuffer(t, 0.05, None, None)
    for i in (1, 2, 3):
        acks.add(_delivery(i))
    assert t.claims.ops() == []  # batched, not sent yet
    assert len(t.loop.later) == 1  # one flush timer for the three
    assert [d.id for d in acks.waiting()] == [1, 2, 3]  # heartbeated meanwhile
    t.loop.fire()
    [sent] = list(t.claims.sent)
    assert sent.op == "ack" and [d.id for d in sent.args[0]] == [1, 2, 3]
    with caplog.at_level(logging.WARNING, logger="kombu_alkstore"):
        t.claims.answer("ack", {1, 3})
    assert "ack of message 2 on 'q' refused" in caplog.text


def test_acks_from_another_thread_are_sent_at_once():
    t = _link()
    acks = AckBuffer(t, 0.05, None, None)
    worker = threading.Thread(target=acks.add, args=(_delivery(7),))
    worker.start()
    worker.join()
    assert t.loop.later == [] and t.claims.ops() == []  # not on the loop's session
    assert [d.id for d in t.store.acked] == [7]  # at once, on the store
