"""The rates' log numbers every row it is given (migration 14, docs/flow-control.md "How
it is enforced"), whoever inserts it: a row written as a worker of an earlier version
writes it (queue, key and time, no ordinal) is numbered after the rows before it, and a
time earlier than the last row's (a clock stepped back) is logged as the last row's, so
a queue's rows stay one run of ordinals in time order and a claim reading a window's use
from them counts that row.

Each engine's own log table, written through a connection of our own (as an older
worker's statements would), read back the same way; the claim through the Store API.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import psycopg
import pytest

from kombu_alkstore.store.schema import build_tables


def writer(target) -> tuple[str, Callable[[str, tuple], list[tuple]]]:
    """``(claim_log as written in SQL, run(sql, params) -> rows)`` on ``target``'s store."""
    tables = build_tables(target.schema, target.engine)
    log = tables.names()["claim_log"]
    if target.engine == "postgresql":

        def run(sql: str, params: tuple) -> list[tuple]:
            with psycopg.connect(target.url, autocommit=True) as conn:
                cur = conn.execute(sql.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []

        return log, run
    path = target.url.removeprefix("sqlite:///")

    def run(sql: str, params: tuple) -> list[tuple]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    return log, run


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_rows_logged_without_ordinals_are_numbered_and_a_stepped_back_time_counts(
    engine, request, tmp_path
):
    target = request.getfixturevalue(f"{'pg' if engine == 'postgresql' else 'sqlite'}_target")
    with target.open() as store:
        store.set_rate("q", "6/5s")
        for n in range(3):
            store.enqueue("q", b"job %d" % n)
        log, run = writer(target)
        now = time.time()
        insert = f"INSERT INTO {log} (queue, limit_key, at) VALUES (?, ?, ?)"
        for i in range(5):
            run(insert, ("q", "k" if i % 2 else None, now - 0.5 + i * 0.01))
        run(insert, ("q", "k", now - 30))  # a clock stepped back: outside the window
        rows = run(f"SELECT n, kn, limit_key, at FROM {log} WHERE queue = ? ORDER BY n", ("q",))
        assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
        assert [r[1] for r in rows] == [None, 1, None, 2, None, 3]
        times = [r[3] for r in rows]
        assert times == sorted(times) and times[5] == times[4]
        # six claims within the last 5 s as logged: the rate has no room left
        assert store.claim(["q"], 3) == []
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6
