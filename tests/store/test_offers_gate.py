"""The hand-off's gate (issue 35, ``offers_open`` in postgres/queries.sql): behind a
pinned xmin horizon the offers table's dead versions pile up (each offer and each
hand-off is an UPDATE), and every publish would read them all. Past a few pages a
publish looks for no offer and a register withdraws, and answers so (the worker then
offers nothing for a while: tests/transport/test_handoff.py); a VACUUM once the horizon
moves on truncates the emptied table and the hand-off resumes.

A real PostgreSQL (this machine's runs with ``autovacuum = off``), a real waiter and
claim session; each test in its own schema. Counted, not timed: the shared buffers the
publish statement reads from ``offers`` (``EXPLAIN (ANALYZE, BUFFERS)``, rolled back).
"""

from __future__ import annotations

import psycopg

from kombu_alkstore.store import NewJob
from tests.helpers import (
    explained_plan,
    past_the_horizon,
    scans_buffers,
    table_pages,
    vacuumed_away,
)

PATIENCE = 10.0


def offers_buffers(conn: psycopg.Connection, store, queue: str) -> int:
    """Shared buffers (hit + read) a publish of one job to ``queue`` reads from the
    offers table, as the store would publish now (rolled back)."""
    params = store._insert_params(NewJob(queue, b"probe"))
    return scans_buffers(explained_plan(conn, store._sql["insert"], params), "offers")


def offer_rows(conn: psycopg.Connection, schema: str) -> list[tuple]:
    return conn.execute(f'SELECT pid, chan, slots FROM "{schema}".offers').fetchall()


def offers_pages(conn: psycopg.Connection, schema: str) -> int:
    return table_pages(conn, f'"{schema}".offers')


def register(session, waiter, slots: int) -> bool:
    """Offer ``slots``; the store's answer: whether publishers read offers (the gate)."""
    answers: list = []
    session.register(waiter.address, 7, ["q"], slots, answers.append)
    session.wait()
    [answer] = answers
    assert isinstance(answer, bool), answer
    return answer


def close_the_gate(session, waiter, admin: psycopg.Connection, schema: str) -> None:
    """Re-register an offer (each an UPDATE whose old version a pin, held by the caller,
    keeps) until the table is past the gate and the register withdraws it."""
    for i in range(20_000):
        open_ = register(session, waiter, 1 + i % 2)
        assert open_ == bool(offer_rows(admin, schema))  # the answer says what stands
        if not open_:
            break  # the gate closed: the register withdrew the offer
    else:
        raise AssertionError(f"offers grew to {offers_pages(admin, schema)} pages")
    assert offers_pages(admin, schema) > 8


def handed_off_again(store, session, waiter, admin: psycopg.Connection, schema: str) -> None:
    """The gate is open: an offer registered stands, and a publish is handed to it."""
    assert register(session, waiter, 1) is True
    assert len(offer_rows(admin, schema)) == 1
    waiter.poll()
    handed = store.enqueue("q", b"handed")
    wake = waiter.wait(PATIENCE)
    [(chan, delivery)] = wake.handoffs
    assert (chan, delivery.id) == (7, handed)
    assert store.ack([delivery]) == {handed}


def test_a_bloated_offers_table_is_not_read_by_publishes_until_vacuumed(pg_target):
    """Offers re-registered behind a pinned horizon grow the table; once past the gate
    a register withdraws its offer and a publish neither reads the table nor hands off
    (the job is pending and announced); after VACUUM the hand-off is back. Without the
    gate the publish after the bloat reads every page and hands the job off."""
    schema = pg_target.schema
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as explain,
        psycopg.connect(pg_target.url) as pin,
    ):
        waiter, session = store.waiter(), store.session()
        try:
            register(session, waiter, 1)
            assert len(offer_rows(admin, schema)) == 1
            small = offers_buffers(explain, store, "q")
            assert 0 < small <= 4, small  # its page and its key's index pages

            pin.execute("SELECT txid_current()")  # holds an XID, idle in transaction
            close_the_gate(session, waiter, admin, schema)
            assert offers_buffers(explain, store, "q") == 0  # the table is not read

            waiter.poll()
            jid = store.enqueue("q", b"gated")
            wake = waiter.wait(PATIENCE)
            assert wake.handoffs == [] and "q" in wake.queues, wake
            assert store.get_job(jid).state == "pending"
            [got] = store.claim(["q"], 1)  # claimed as usual
            assert store.ack([got]) == {jid}

            # The horizon moves on: VACUUM truncates the emptied table, the gate opens.
            pin.rollback()
            vacuumed_away(admin, f'"{schema}".offers')
            handed_off_again(store, session, waiter, admin, schema)
        finally:
            session.close()
            waiter.close()


def test_the_holders_check_reopens_the_handoff_once_the_horizon_moves_on(pg_target):
    """``Store.reopen_handoff`` (the maintenance lease holder's check, every few seconds):
    nothing while the gate is open; past it a VACUUM each call, which frees nothing behind
    the pin and, once the horizon moved on, truncates the emptied table, so the hand-off
    is back without anyone else's VACUUM (autovacuum may not come: registers that only
    withdraw leave no new dead rows to reach its threshold)."""
    schema = pg_target.schema
    with (
        pg_target.open() as store,
        psycopg.connect(pg_target.url, autocommit=True) as admin,
        psycopg.connect(pg_target.url) as pin,
    ):
        waiter, session = store.waiter(), store.session()
        try:
            register(session, waiter, 1)
            assert store.reopen_handoff() is False  # open: nothing to do

            pin.execute("SELECT txid_current()")
            close_the_gate(session, waiter, admin, schema)
            pages = offers_pages(admin, schema)
            assert store.reopen_handoff() is True
            assert offers_pages(admin, schema) == pages  # the pin keeps every version
            assert register(session, waiter, 1) is False  # still closed: withdrawn
            assert offer_rows(admin, schema) == []

            pin.rollback()
            past_the_horizon(admin, lambda: not store.reopen_handoff())
            assert offers_pages(admin, schema) <= 8  # the gate's size: open
            handed_off_again(store, session, waiter, admin, schema)
        finally:
            session.close()
            waiter.close()
