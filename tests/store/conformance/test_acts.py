"""Operator acts on record (store/acts.py): written with their change, in its transaction;
none for a change of nothing; the table refuses UPDATE and DELETE, but for the retention
trim of rows older than the retention."""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob, Store
from kombu_alkstore.store.acts import ACT_IDS_CAP, ActFilter, Actor
from tests.helpers import run_sql

ALICE = Actor("ops:alice", "ticket-4711")


def _dead(store: Store, queue: str, n: int) -> list[int]:
    store.enqueue_many([NewJob(queue, f"secret-arg-{queue}-{i}".encode()) for i in range(n)])
    ds = store.claim([queue], n)
    store.fail(ds, "boom")
    return sorted(d.id for d in ds)


def test_each_act_is_written_with_its_change(store):
    ids = store.enqueue_many([NewJob("q", b"a"), NewJob("q", b"b")])
    assert store.purge("q", actor=ALICE) == 2
    assert store.pause_queue("q", actor=ALICE)
    assert store.resume_queue("q", actor=Actor("ops:bob"))
    before = time.time()
    d1, d2 = _dead(store, "d1", 3), _dead(store, "d2", 1)
    assert store.dead_move(d1[:1], "elsewhere", actor=ALICE) == 1
    assert store.dead_requeue(queue="d1", actor=ALICE) == 2
    assert store.dead_purge(ids=d2, actor=ALICE) == 1
    acts = store.acts()
    assert [a.act for a in acts] == [
        "dead_purge",
        "dead_requeue",
        "dead_move",
        "queue_resume",
        "queue_pause",
        "queue_purge",
    ]
    purge = acts[-1]
    assert (purge.actor, purge.reason, purge.queue, purge.count) == (
        "ops:alice",
        "ticket-4711",
        "q",
        2,
    )
    assert purge.ids == tuple(sorted(ids))
    assert acts[3].actor == "ops:bob" and acts[3].count is None and acts[3].reason is None
    move = acts[2]
    assert (move.queue, move.target, move.count, move.ids) == ("d1", "elsewhere", 1, (d1[0],))
    assert acts[1].ids == tuple(d1[1:]) and acts[0].ids == tuple(d2)
    # the database's clock, in epoch seconds
    assert all(abs(a.at - before) < 60 for a in acts)
    # filters
    assert [a.act for a in store.acts(ActFilter(by="ops:bob"))] == ["queue_resume"]
    assert [a.act for a in store.acts(ActFilter(queue="d1"))] == ["dead_requeue", "dead_move"]
    assert [a.id for a in store.acts(ActFilter(act="queue_pause"))] == [acts[4].id]
    assert store.acts(limit=2) == acts[:2]
    assert store.acts(ActFilter(since=time.time() + 3600)) == []
    assert store.acts(ActFilter(before_id=acts[1].id)) == acts[2:]


def test_no_act_for_a_change_of_nothing_or_without_an_actor(store):
    assert store.purge("empty", actor=ALICE) == 0
    assert store.dead_requeue(queue="nothing", actor=ALICE) == 0
    assert store.dead_purge(ids=[12345], actor=ALICE) == 0
    assert store.dead_move([12345], "x", actor=ALICE) == 0
    assert store.resume_queue("never-paused", actor=ALICE) is False
    store.pause_queue("p", actor=ALICE)
    assert store.pause_queue("p", actor=ALICE) is False  # paused already
    assert [a.act for a in store.acts()] == ["queue_pause"]
    store.enqueue("q", b"x")
    assert store.purge("q") == 1  # no actor (a Celery purge through the transport): no act
    assert len(store.acts()) == 1


def test_an_act_keeps_no_message_content_and_caps_its_ids(store):
    ids = _dead(store, "big", ACT_IDS_CAP + 5)
    assert store.dead_purge(queue="big", actor=ALICE) == ACT_IDS_CAP + 5
    (act,) = store.acts()
    assert act.count == ACT_IDS_CAP + 5 and act.ids == tuple(ids[:ACT_IDS_CAP])
    assert act.ids_left_out == 5
    assert "secret-arg" not in repr(act.as_dict())


def test_one_act_per_queue_changed(store):
    a, b = _dead(store, "qa", 2), _dead(store, "qb", 1)
    assert store.dead_requeue(actor=ALICE) == 3
    got = {x.queue: x.ids for x in store.acts()}
    assert got == {"qa": tuple(a), "qb": tuple(b)}


def test_actor_and_reason_are_codes(store):
    store.enqueue("q", b"x")
    for bad in (Actor(""), Actor("a\nb"), Actor("x" * 201), Actor("ok", "two\nlines")):
        with pytest.raises(ConfigurationError):
            store.purge("q", actor=bad)
    assert store.size("q") == 1 and store.acts() == []  # refused before any change


def test_the_act_rolls_back_with_its_change(store, target):
    """The act is in the change's transaction: a failing act insert (the table refuses an
    actor with a line break, past the Python check) leaves the jobs where they were."""
    store.enqueue_many([NewJob("q", b"a"), NewJob("q", b"b")])
    with pytest.raises(store.database_errors):
        store.purge("q", actor=_Unchecked("bad\nactor"))
    assert store.size("q") == 2
    assert store.acts() == []


class _Unchecked:
    """An actor whose check lets anything through (the table is the last word)."""

    def __init__(self, by: str) -> None:
        self.by, self.reason = by, None

    def checked(self) -> _Unchecked:
        return self


def _raw(target, sql: str) -> None:
    run_sql(target, sql)


REFUSED = (psycopg.Error, sqlite3.Error)


def test_the_table_refuses_update_and_delete(store, target):
    store.enqueue("q", b"x")
    store.purge("q", actor=ALICE)
    table = store.names["acts"]  # as written in SQL, on either engine
    with pytest.raises(REFUSED, match="append-only"):
        _raw(target, f"UPDATE {table} SET actor = 'someone else'")
    with pytest.raises(REFUSED, match="append-only"):
        _raw(target, f"DELETE FROM {table}")
    if target.engine == "postgresql":  # SQLite has no TRUNCATE
        with pytest.raises(REFUSED, match="append-only"):
            _raw(target, f"TRUNCATE {table}")
    # The trim admits only rows older than its retention: a declared retention does not
    # open the table for recent rows.
    assert store.trim_acts(retention=3600) == 0
    (act,) = store.acts()
    assert (act.actor, act.count) == ("ops:alice", 1)


def test_retention_trim_deletes_only_rows_past_the_retention(store):
    store.pause_queue("old", actor=ALICE)
    time.sleep(1.2)
    store.pause_queue("new", actor=ALICE)
    assert store.trim_acts(retention=1.0, batch=1) == 1
    assert [a.queue for a in store.acts()] == ["new"]
    assert store.trim_acts(retention=1.0) == 0
    with pytest.raises(ConfigurationError):
        store.trim_acts(retention=0)


def test_a_store_without_retention_keeps_every_act(opener):
    store = opener(acts_retention=None)
    store.pause_queue("q", actor=ALICE)
    assert store.trim_acts() == 0
    assert len(store.acts()) == 1


def test_the_maintenance_holder_trims_acts_past_the_retention(opener):
    from kombu_alkstore.maintenance.runner import Maintenance

    store = opener(acts_retention=1.0)
    store.pause_queue("old", actor=ALICE)
    time.sleep(1.2)
    store.pause_queue("new", actor=ALICE)
    Maintenance(60).round(store)
    assert [a.queue for a in store.acts()] == ["new"]


def test_the_trim_refuses_a_retention_that_would_admit_every_delete(store):
    for bad in (float("nan"), float("inf"), 0, -1):
        with pytest.raises(ConfigurationError, match="acts retention must be a number > 0"):
            store.trim_acts(retention=bad)
