"""A heartbeat in flight across its claim's deadline never lets a limited queue go over
its limit (PostgreSQL: a heartbeat and a claim are concurrent transactions; on SQLite
they take turns on the file). Reproduces the review's race with a real second session:
the heartbeat begins just before the deadline and commits just after, while another
claim looks at the queue."""

from __future__ import annotations

import time

import psycopg

from tests.conftest import PG_URL


def _heartbeat_uncommitted(store, delivery) -> tuple[psycopg.Connection, int]:
    """The store's own heartbeat statement, sent on a session of its own and not
    committed yet (a worker whose commit is slow)."""
    conn = psycopg.connect(PG_URL)
    params = store.statements.params(
        {"ids": [delivery.id], "tokens": [delivery.token], "extend": None}
    )
    return conn, conn.execute(store.statements.sql["heartbeat"], params).rowcount


def test_a_heartbeat_committing_after_the_deadline_keeps_its_slot(pg_target):
    with pg_target.open() as store:
        store.set_limit("q", 1)
        store.enqueue("q", b"x", visibility_timeout=1.0)
        (x,) = store.claim(["q"], 1)
        store.enqueue("q", b"y", visibility_timeout=1.0)
        time.sleep(max(0.0, x.deadline - store.now() - 0.3))
        hb, extended = _heartbeat_uncommitted(store, x)
        try:
            assert extended == 1
            time.sleep(max(0.0, x.deadline - store.now() + 0.2))  # the deadline passes
            assert store.claim(["q"], 1) == []  # x's slot is still held: its beat is in flight
        finally:
            hb.commit()
            hb.close()
        assert store.claim(["q"], 1) == []  # x lives on, with its new deadline
        (limit,) = [q for q in store.limits() if q.queue == "q"]
        assert (limit.used, limit.limit) == (1, 1)


def test_a_lapsed_claim_nobody_holds_frees_its_slot_and_its_beat_is_refused(pg_target):
    with pg_target.open() as store:
        store.set_limit("q", 1)
        store.enqueue("q", b"x", visibility_timeout=1.0)
        (x,) = store.claim(["q"], 1)
        store.enqueue("q", b"y", visibility_timeout=30.0)
        time.sleep(max(0.0, x.deadline - store.now() + 0.2))
        got = store.claim(["q"], 2)  # x (lapsed, claimed again) or y: one slot, one claim
        assert len(got) == 1
        assert store.heartbeat([x]) == set()  # too late: x's claim is gone
        (limit,) = [q for q in store.limits() if q.queue == "q"]
        assert limit.used == 1
