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

import time

from kombu_alkstore.store.schema import build_tables
from tests.helpers import sql_rows


def test_rows_logged_without_ordinals_are_numbered_and_a_stepped_back_time_counts(target):
    log = build_tables(target.schema, target.engine).names()["claim_log"]
    with target.open() as store:
        store.set_rate("q", "6/5s")
        for n in range(3):
            store.enqueue("q", b"job %d" % n)
        now = time.time()
        insert = f"INSERT INTO {log} (queue, limit_key, at) VALUES (?, ?, ?)"
        for i in range(5):
            sql_rows(target, insert, ("q", "k" if i % 2 else None, now - 0.5 + i * 0.01))
        sql_rows(target, insert, ("q", "k", now - 30))  # a clock stepped back: outside the window
        rows = sql_rows(
            target, f"SELECT n, kn, limit_key, at FROM {log} WHERE queue = ? ORDER BY n", ("q",)
        )
        assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
        assert [r[1] for r in rows] == [None, 1, None, 2, None, 3]
        times = [r[3] for r in rows]
        assert times == sorted(times) and times[5] == times[4]
        # six claims within the last 5 s as logged: the rate has no room left
        assert store.claim(["q"], 3) == []
        [use] = store.limits()
        assert use.rates is not None and use.rates.used == 6
