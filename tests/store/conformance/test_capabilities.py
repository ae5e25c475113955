"""Every capability an engine declares (``store.capabilities``), through the public
interface only: each capability's test skips exactly when the engine declares it lacks
it, and its counterpart checks what the interface promises without it.

No engine name is tested and no driver imported here (the caller connection of
``declare_outside_transaction`` comes from test_transactional.py, which may know them).
"""

from __future__ import annotations

import os
import select
import stat
import threading
import time

import pytest

from kombu_alkstore.store import ClaimSession, NewJob, bound_connection
from kombu_alkstore.store.admin import RatePoint
from tests.store.conformance.helpers import EPS, forged
from tests.store.conformance.test_transactional import _caller_connection

#: Seconds a test waits for an answer or a wake-up that should come at once.
PATIENCE = 5.0


def _need(store, capability: str) -> None:
    if not getattr(store.capabilities, capability):
        pytest.skip(f"{store.engine} has no {capability}")


def _lacking(store, capability: str) -> None:
    if getattr(store.capabilities, capability):
        pytest.skip(f"{store.engine} has {capability}")


def _publish_later(store, queue: str, body: bytes, **kwargs) -> threading.Thread:
    """Enqueue on ``store`` from another thread, shortly after the caller starts waiting."""

    def publish() -> None:
        time.sleep(0.2)
        store.enqueue(queue, body, **kwargs)

    t = threading.Thread(target=publish)
    t.start()
    return t


# ---------------------------------------------------------------------------- listener
def test_listener_wakes_with_the_queue_and_announces_due_times(store, opener):
    _need(store, "listener")
    other = opener()
    waiter = store.waiter()
    try:
        fd = waiter.fileno()
        assert isinstance(fd, int) and stat.S_ISSOCK(os.fstat(fd).st_mode)
        waiter.poll()  # drain anything from setup
        t = _publish_later(other, "lq", b"x")
        ready, _, _ = select.select([fd], [], [], PATIENCE)  # selectable, as a loop does
        t.join()
        assert ready == [fd]
        wake = waiter.wait(PATIENCE)
        assert "lq" in wake.queues, wake
        assert wake.next_at is None
        # A delayed job announces when it becomes due, and names no queue due now.
        run_at = time.time() + 30
        other.enqueue("dq", b"later", run_at=run_at)
        wake = waiter.wait(PATIENCE)
        assert "dq" not in wake.queues, wake
        assert wake.next_at == pytest.approx(run_at, abs=EPS)
    finally:
        waiter.close()


def test_without_listener_the_waiter_polls_and_still_wakes(store, opener):
    _lacking(store, "listener")
    other = opener()
    waiter = store.waiter()
    try:
        assert waiter.fileno() is None
        waiter.poll()
        t = _publish_later(other, "lq", b"x")
        t0 = time.monotonic()
        wake = waiter.wait(PATIENCE)
        t.join()
        assert wake.any or "lq" in wake.queues, wake
        assert time.monotonic() - t0 < PATIENCE
    finally:
        waiter.close()


# ----------------------------------------------------------------------------- session
class Answers:
    """Callbacks recording every call: ``calls[label]`` lists what each call got."""

    def __init__(self) -> None:
        self.calls: dict[str, list] = {}

    def __call__(self, label: str):
        self.calls.setdefault(label, [])
        return lambda *got: self.calls[label].append(got[0] if len(got) == 1 else got)

    def once(self, label: str):
        """The one answer of ``label`` (its callback ran exactly once)."""
        got = self.calls[label]
        assert len(got) == 1, (label, got)
        return got[0]


def _answer_by_select(session: ClaimSession) -> None:
    """Read answers as an event loop does: select on the socket, then on_readable."""
    end = time.monotonic() + PATIENCE
    while session.in_flight():
        ready, _, _ = select.select([session.fileno()], [], [], max(end - time.monotonic(), 0))
        assert ready, f"{session.in_flight()} requests unanswered after {PATIENCE} s"
        session.on_readable()


def test_session_answers_every_request_once_by_callback(store, opener):
    _need(store, "session")
    session = store.session()
    assert isinstance(session, ClaimSession)
    try:
        for i, priority in enumerate([0, 5, 0, 9, 5]):
            store.enqueue("q", b"x", msg_id=f"m{i}", priority=priority)
        later = time.time() + 600
        store.enqueue("later", b"x", msg_id="later", run_at=later)
        answers = Answers()
        session.claim(["q"], 3, answers("claim"))
        session.has_due(["q"], answers("due"))
        session.has_due(["empty"], answers("not due"))
        session.next_due(["later", "empty"], answers("next due"))
        session.next_due(["empty"], answers("none due"))
        assert session.in_flight() == 5  # sent, none answered: no call waited
        _answer_by_select(session)
        got, more = answers.once("claim")
        assert [d.msg_id for d in got] == ["m3", "m1", "m4"]  # priority DESC, run_at, id
        assert more is False
        assert answers.once("due") is True
        assert answers.once("not due") is False
        assert answers.once("next due") == pytest.approx(later, abs=0.01)
        assert answers.once("none due") is None

        # Acks: the ones with their claim's token land; a stale token is refused.
        stale = forged(got[2], token=got[2].token + 1)
        session.ack(got[:2], answers("ack"))
        session.ack([stale], answers("stale ack"))
        deadline = store.get_job(got[2].id).deadline
        time.sleep(0.05)
        session.heartbeat([got[2], stale], answers("beat"))
        session.wait()  # the blocking way to read every answer
        assert session.in_flight() == 0
        assert answers.once("ack") == {got[0].id, got[1].id}
        assert answers.once("stale ack") == set()
        assert answers.once("beat") == {got[2].id}  # the stale token's beat is refused
        assert store.get_job(got[2].id).deadline > deadline
        assert store.get_job(got[2].id).state == "processing"
        (c,) = store.counts(["q"])
        assert (c.pending, c.processing) == (2, 1)

        # A hand-back: pending again at once, its attempt refunded; a stale one is not.
        session.release([got[2]], answers("release"))
        session.release([stale], answers("stale release"))
        # Rate counts written (and trimmed) on the session, as a worker's loop does.
        point = RatePoint("q", time.time() // 60 * 60, 2, 1)
        session.write_rates([point], time.time() - 86400, answers("rates"))
        session.wait()
        assert answers.once("release") == {got[2].id}
        assert answers.once("stale release") == set()
        back = store.get_job(got[2].id)
        assert (back.state, back.attempts) == ("pending", 0)
        assert answers.calls["rates"] == [None, None]
        assert [(p.queue, p.published, p.acked) for p in store.rate_points(0)] == [("q", 2, 1)]
    finally:
        session.close()


def test_without_session_there_is_no_claim_session(store):
    _lacking(store, "session")
    assert store.session() is None
    assert not store.capabilities.handoff  # hand-off needs the session


# ----------------------------------------------------------------------------- handoff
def test_handoff_gives_an_offered_slot_one_claimed_job(store, opener):
    _need(store, "handoff")
    assert store.capabilities.session and store.capabilities.listener  # what it needs
    other = opener()
    waiter = store.waiter()
    session = store.session()
    answers = Answers()
    try:
        assert waiter.address is not None
        session.register(waiter.address, 7, ["q"], 1, answers("offer"))
        session.wait()
        assert answers.once("offer") is True  # the store reads offers: it stands
        waiter.poll()
        jid = other.enqueue("q", b"handed", msg_id="h-1")
        wake = waiter.wait(PATIENCE)
        [(chan, d)] = wake.handoffs
        assert chan == 7
        assert (d.id, d.queue, d.body, d.msg_id, d.attempts) == (jid, "q", b"handed", "h-1", 1)
        assert store.get_job(jid).state == "processing"  # claimed already, by the publisher
        assert store.claim(["q"], 10) == []
        # The offer had one slot: the next publish is pending and announced, not handed off.
        second = other.enqueue("q", b"pending")
        wake = waiter.wait(PATIENCE)
        assert wake.handoffs == [] and "q" in wake.queues, wake
        assert store.get_job(second).state == "pending"
        assert store.ack([d]) == {jid}  # the handed-off claim is a claim like any other
        assert [x.id for x in store.claim(["q"], 10)] == [second]

        # retire() withdraws the offers: nothing is handed off after it.
        session.register(waiter.address, 7, ["q"], 1, answers("again"))
        session.wait()
        assert answers.once("again") is True
        assert waiter.retire() == []
        waiter.poll()
        third = other.enqueue("q", b"after retire")
        wake = waiter.wait(PATIENCE)
        assert wake.handoffs == [], wake
        assert store.get_job(third).state == "pending"
    finally:
        session.close()
        waiter.close()


def test_without_handoff_a_waiter_has_no_address(store):
    _lacking(store, "handoff")
    waiter = store.waiter()
    try:
        assert waiter.address is None
        assert waiter.retire() == []
    finally:
        waiter.close()


# ------------------------------------------------------------------- pipelined publish
def test_pipelined_publish_lands_every_job_once_flushed(store, opener):
    _need(store, "pipelined_publish")
    s = opener(confirm_publish=False)
    for i in range(200):
        s.publish([NewJob("pq", b"x", msg_id=f"m{i}")])
    s.publish([NewJob("pq", b"y", msg_id=f"b{i}") for i in range(3)])
    s.flush_publishes()
    assert [d.msg_id for d in store.claim(["pq"], 1000)] == (
        [f"m{i}" for i in range(200)] + ["b0", "b1", "b2"]
    )
    s.flush_publishes()  # nothing left: returns at once


def test_without_pipelined_publish_a_publish_is_confirmed_at_return(store, opener):
    _lacking(store, "pipelined_publish")
    s = opener(confirm_publish=False)  # asked for, but the engine confirms anyway
    s.publish([NewJob("pq", b"x", msg_id="m0"), NewJob("pq", b"y", msg_id="m1")])
    assert [d.msg_id for d in store.claim(["pq"], 10)] == ["m0", "m1"]
    s.flush_publishes()  # nothing to wait for


def test_a_confirmed_publish_lands_at_return(store):
    """``confirm_publish`` on (the default): every engine confirms before returning."""
    store.publish([NewJob("pq", b"x", msg_id="m0")])
    assert [d.msg_id for d in store.claim(["pq"], 10)] == ["m0"]


# --------------------------------------------------------- declare outside transaction
def test_declarations_commit_outside_the_callers_transaction(store, target, tmp_path):
    _need(store, "declare_outside_transaction")
    conn = _caller_connection(target, tmp_path)
    try:
        with bound_connection(conn):
            store.enqueue("tx", b"rolled back")
            with store.detached():
                store.queue_declare("declared", expires=60)
                store.exchange_declare("ex", "direct")
                store.bind("ex", "declared", "declared")
                assert store.queue_exists("declared")  # committed state, read outside
        conn.rollback()
    finally:
        conn.close()
    assert store.queue_exists("declared")  # committed on its own
    assert store.bindings("ex") == [("declared", "declared")]
    assert store.claim(["tx"], 10) == []  # the caller's own write rolled back


def test_without_it_declarations_join_the_callers_transaction(store, target, tmp_path):
    _lacking(store, "declare_outside_transaction")
    conn = _caller_connection(target, tmp_path)
    try:
        with bound_connection(conn):
            store.enqueue("tx", b"rolled back")
            with store.detached():  # cannot leave the caller's transaction: joins it
                store.queue_declare("declared", expires=60)
                store.exchange_declare("ex", "direct")
                store.bind("ex", "declared", "declared")
                assert store.queue_exists("declared")  # its own uncommitted write
        conn.rollback()
    finally:
        conn.close()
    assert not store.queue_exists("declared")  # rolled back with the caller
    assert store.bindings("ex") == []
    assert store.claim(["tx"], 10) == []
