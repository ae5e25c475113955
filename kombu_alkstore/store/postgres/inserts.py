"""The statements a confirmed publish runs, and which one it runs.

``insert`` hands a due job off to an idle worker's offer (reading ``offers``) or leaves
it pending; ``insert_pending`` only leaves it pending; ``insert_unique`` enqueues a job
with a unique key unless a live job holds it (queries.sql). Each announces its job
unless no waiter hears, and then its row's ``notified`` is NULL.

Guarantees: every job is inserted by one of them in the caller's order, all of one
call in one transaction; while this publisher's last publish was heard by nobody (no
worker idle, so no offer worth reading) plain jobs run ``insert_pending``, and one heard
again sends the next back to ``insert``. At least every :data:`RECHECK` seconds a publish
runs ``insert`` all the same: workers of a version before the hearing locks offer slots
but never hear, and so still get hand-offs. That choice is a hint (threads may race on
it): either statement publishes correctly, a job not handed off is announced and claimed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from itertools import groupby
from operator import itemgetter
from typing import Any

import psycopg
from psycopg.rows import dict_row

#: Seconds between looks for offers (``insert``) while nobody hears.
RECHECK = 1.0


class Inserts:
    """One store's publish statements (confirmed path), with the hint of whether its
    last publish was heard."""

    def __init__(self, sql: Mapping[str, str]) -> None:
        self._sql = sql
        #: Whether the last publish was heard (or handed off); see the module docstring.
        self.heard = True
        #: When (monotonic) a publish last ran ``insert``.
        self._looked = 0.0

    def run(self, conn: psycopg.Connection, params: list[dict[str, Any]]) -> list[int | None]:
        """Insert the jobs ``params`` on ``conn`` (one transaction for several); a job
        whose unique key is held has None for its id."""
        now = time.monotonic()
        look = self.heard or now - self._looked >= RECHECK
        if look:
            self._looked = now
        plain = "insert" if look else "insert_pending"
        keys = [plain if p.get("unique_key") is None else "insert_unique" for p in params]
        rows: list[dict[str, Any] | None] = []
        if len(params) == 1:
            rows.append(
                conn.cursor(row_factory=dict_row).execute(self._sql[keys[0]], params[0]).fetchone()
            )
        else:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                # In the order given: each run of jobs with the same statement at once.
                for key, run in groupby(zip(keys, params, strict=True), key=itemgetter(0)):
                    cur.executemany(self._sql[key], [p for _, p in run], returning=True)
                    while True:
                        rows.append(cur.fetchone())
                        if not cur.nextset():
                            break
        answered = [row for row in rows if row is not None]
        if answered:
            self.heard = answered[-1]["notified"] is not None
        return [row["id"] if row else None for row in rows]
