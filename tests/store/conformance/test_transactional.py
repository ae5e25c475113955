"""Transactional publish: a caller's connection (bound_connection)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob, bound_connection
from tests.store.conformance.helpers import PG_URL


# -------------------------------------------------------------- transactional publish
def _caller_connection(target, tmp_path):
    if target.engine == "postgresql":
        return psycopg.connect(target.url)  # not autocommit: a transaction is open
    conn = sqlite3.connect(tmp_path / "broker.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_bound_connection_commits_or_rolls_back_with_the_caller(store, target, tmp_path, outcome):
    conn = _caller_connection(target, tmp_path)
    try:
        with bound_connection(conn):
            ids = store.enqueue_many([NewJob("tx", b"a"), NewJob("tx", b"b")])
        if outcome == "commit":
            conn.execute("COMMIT") if target.engine == "sqlite" else conn.commit()
        else:
            conn.execute("ROLLBACK") if target.engine == "sqlite" else conn.rollback()
    finally:
        conn.close()
    got = [d.id for d in store.claim(["tx"], 10)]
    assert got == (ids if outcome == "commit" else [])


def test_bound_connection_to_another_database_is_refused(store, engine, tmp_path):
    if engine == "postgresql":  # same server, another database
        conn = psycopg.connect(PG_URL.rsplit("/", 1)[0] + "/postgres")
    else:
        conn = sqlite3.connect(tmp_path / "elsewhere.db")
    try:
        with pytest.raises(ConfigurationError), bound_connection(conn):
            store.enqueue("tx", b"x")
    finally:
        conn.close()
    assert store.counts() == []
