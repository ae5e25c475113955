"""Claims and acks that do not block an event loop (PostgreSQL's claim session).

What ``store/postgres/claims.py`` promises, against a real server: the answers are the
same as the blocking calls', they come back in send order, a statement the server
refuses fails only its own callback, and a lost connection fails every callback in
flight while losing no job (a claim that committed lapses after its visibility timeout).
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import refuse_poison


@pytest.fixture
def pg(pg_target):
    s = pg_target.open(visibility_timeout=1)
    yield s
    s.close()


@pytest.fixture
def claims(pg):
    c = pg.session()
    yield c
    c.close()


class Answers(list):
    """Callbacks that record (label, answer) in the order they are called."""

    def claim(self, label: str):
        return lambda got, more: self.append((label, got, more))

    def ack(self, label: str):
        return lambda landed: self.append((label, landed, None))


def test_claim_and_ack_answer_as_the_blocking_calls(pg, claims):
    for i, priority in enumerate([0, 5, 0, 9, 5]):
        pg.enqueue("q", b"x", msg_id=f"m{i}", priority=priority)
    answers = Answers()
    claims.claim(["q"], 3, answers.claim("c"))
    assert claims.in_flight() == 1  # sent, not answered: the call did not wait
    claims.wait()
    [(_, got, more)] = answers
    assert [d.msg_id for d in got] == ["m3", "m1", "m4"]  # priority DESC, then order
    assert more is False
    answers.clear()
    claims.ack(got[:2], answers.ack("a"))
    claims.wait()
    assert answers == [("a", {got[0].id, got[1].id}, None)]
    [counts] = pg.counts(["q"])
    assert (counts.pending, counts.processing) == (2, 1)


def test_answers_come_back_in_send_order(pg, claims):
    for i in range(6):
        pg.enqueue("q", b"x", msg_id=f"m{i}")
    answers = Answers()
    claims.claim(["q"], 2, answers.claim("first"))
    claims.claim(["q", "other"], 2, answers.claim("second"))
    claims.claim(["q"], 5, answers.claim("third"))
    claims.wait()
    assert [label for label, _, _ in answers] == ["first", "second", "third"]
    assert [[d.msg_id for d in got] for _, got, _ in answers] == [
        ["m0", "m1"],
        ["m2", "m3"],
        ["m4", "m5"],
    ]


def test_a_refused_statement_fails_only_its_own_callback(pg, pg_target, claims):
    refuse_poison(pg_target, "UPDATE")
    pg.enqueue("poison", b"x", msg_id="bad")
    pg.enqueue("q", b"x", msg_id="good")
    answers = Answers()
    claims.claim(["poison"], 1, answers.claim("bad"))
    claims.claim(["q"], 1, answers.claim("good"))
    claims.wait()
    (_, refused, _), (_, got, _) = answers
    assert isinstance(refused, psycopg.errors.RaiseException)
    assert "refused by test" in str(refused)
    assert [d.msg_id for d in got] == ["good"]
    [counts] = pg.counts(["poison"])
    assert counts.pending == 1  # its claim rolled back


def test_a_lost_connection_fails_every_callback_and_loses_no_job(pg, pg_target, claims):
    for i in range(20):
        pg.enqueue("q", b"x", msg_id=f"m{i}")
    answers = Answers()
    claims.claim(["q"], 4, answers.claim("claimed"))
    claims.wait()
    held = answers[0][1]
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (claims._conn.info.backend_pid,))
    time.sleep(0.2)
    answers.clear()
    with pytest.raises(psycopg.OperationalError):
        claims.ack(held, answers.ack("ack"))
        claims.claim(["q"], 4, answers.claim("claim"))
        claims.wait()
    assert answers and all(isinstance(a, psycopg.OperationalError) for _, a, _ in answers)
    with pytest.raises(psycopg.OperationalError):  # a broken session says so at once
        claims.claim(["q"], 1, answers.claim("after"))
    time.sleep(1.2)  # the held claims lapse (visibility timeout 1 s)
    assert sorted(d.msg_id for d in pg.claim(["q"], 100)) == sorted(f"m{i}" for i in range(20))


def test_sqlite_has_no_claim_session(sqlite_target):
    s = sqlite_target.open()
    try:
        assert s.session() is None  # its claims are local and block briefly
    finally:
        s.close()
