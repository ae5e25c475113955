"""SQLite engine: one WAL-mode file shared by the processes of one host.

Writes take the database lock up front (``BEGIN IMMEDIATE``) and wait for it up to the
busy timeout; a claim is one ``UPDATE … RETURNING``. Wake-ups poll ``PRAGMA data_version``,
which changes when another connection commits, at a short interval.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigurationError, StoreUnavailable
from .admin import TOTAL_MINUTE, RatePoint
from .base import (
    AMBIENT,
    EXCHANGE_TYPES,
    Delivery,
    Job,
    NewJob,
    QueueCounts,
    ScheduleTick,
    Store,
    SweepResult,
    Waiter,
    Wakeup,
)
from .options import StoreOptions, StoreURL, check_text_params, validate_name
from .schema import SCHEMA_VERSION, require_current

_DEAD_COLS = (
    "id, queue, msg_id, body, priority, attempts, max_attempts, visibility_timeout, "
    "backoff_base, expires_at, created_at"
)
_JOB_COLS = (
    "id, queue, msg_id, body, priority, state, attempts, max_attempts, created_at, run_at, "
    "expires_at, deadline"
)
_DEAD_READ = (
    "id, queue, msg_id, body, priority, 'dead', attempts, max_attempts, created_at, NULL, "
    "expires_at, NULL, died_at, last_error"
)
_IN_QUEUES = "queue IN (SELECT value FROM json_each(:queues))"
# The same, less paused queues (see Store.pause_queue): what claims and due checks look at.
_IN_ACTIVE = (
    "queue IN (SELECT value FROM json_each(:queues) "
    "WHERE value NOT IN (SELECT queue FROM {paused_queues}))"
)
#: The dashboard's dead-letter filter (``admin.DeadFilter.params``); every part optional.
_DEAD_WHERE = """(:queue IS NULL OR queue = :queue)
  AND (:since IS NULL OR died_at >= :since) AND (:until IS NULL OR died_at < :until)
  AND (:error IS NULL OR instr(lower(last_error), lower(:error)) > 0)
  AND (:task1 IS NULL OR instr(body, :task1) > 0 OR instr(body, :task2) > 0)"""
# The validity predicate of every operation on a claim: right token, deadline not passed.
_HELD = (
    "(id, token) IN (SELECT value->>0, value->>1 FROM json_each(:held)) "
    "AND state = 'processing' AND deadline > :now"
)


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a commit survives a process crash (kill -9); an OS crash or
    # power loss may lose the last commits.
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class SQLiteStore(Store):
    """The store in one SQLite file (WAL mode), safe for several processes on one host."""

    engine = "sqlite"

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        super().__init__(url, options)
        self.path = url.path
        self._pid = os.getpid()
        self._lock = threading.RLock()
        t = self.tables
        q = {
            name: t.qualified(getattr(t, name))
            for name in (
                "jobs",
                "dead",
                "exchanges",
                "bindings",
                "queues",
                "schedules",
                "leases",
                "meta",
                "offers",
                "paused_queues",
                "rates",
            )
        }
        self._sql = {k: v.format(**q) for k, v in _SQL.items()}
        try:
            self._db = _connect(self.path, options.busy_timeout)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        if options.setup:
            self.setup()
        else:
            require_current(self.schema_version(), f"{self.path!r} (prefix {options.schema!r})")

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        ambient = AMBIENT.get()
        if ambient is not None:
            yield self._adopt(ambient)
            return
        with self._lock:
            yield self._db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, or the caller's own transaction when one is bound."""
        ambient = AMBIENT.get()
        if ambient is not None:
            yield self._adopt(ambient)
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @staticmethod
    def _array(values: list[Any]) -> str:
        return json.dumps(values)

    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[tuple]:
        with self._read() as conn:
            return conn.execute(self._sql[key], _with_now(params)).fetchall()

    def _one(self, key: str, params: dict[str, Any] | None = None) -> tuple | None:
        with self._read() as conn:
            return conn.execute(self._sql[key], _with_now(params)).fetchone()

    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        with self._read() as conn:  # a single statement is its own transaction
            return conn.execute(self._sql[key], _with_now(params)).rowcount

    def close(self) -> None:
        if os.getpid() == self._pid:
            self.rates_tally.close()
            with self._lock:
                self._db.close()

    # --------------------------------------------------------------------- setup
    def setup(self) -> None:
        if self.schema_version() == SCHEMA_VERSION:
            return  # up to date: no DDL, no write lock
        with self._write() as conn:
            # Read under the write lock: a concurrent setup may have added them already.
            # (A table not there yet is created with every column: it is left out.)
            existing = {}
            for table in self.tables.metadata.sorted_tables:
                cols = {r[1] for r in conn.execute(f'PRAGMA table_info("{table.name}")')}
                if cols:
                    existing[table.name] = cols
            for stmt in self.ddl(existing):
                conn.execute(stmt)

    def schema_version(self) -> int | None:
        with self._read() as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (self.tables.meta.name,),
            ).fetchone()
            if not exists:
                return None
            row = conn.execute(self._sql["version"]).fetchone()
        return int(row[0]) if row else None

    # ------------------------------------------------------------------- enqueue
    def _insert(self, jobs: list[NewJob]) -> list[int]:
        now = time.time()
        ids = []
        with self._write() as conn:
            for j in jobs:
                run_at = now + j.delay if j.delay is not None else (j.run_at or now)
                row = conn.execute(
                    self._sql["insert"],
                    {**self._job_params(j), "run_at": run_at, "now": now},
                ).fetchone()
                ids.append(row[0])
        return ids

    # --------------------------------------------------------------------- claim
    def claim(self, queues: Sequence[str], limit: int = 1) -> list[Delivery]:
        if limit < 1 or not queues:
            return []
        params = {"queues": json.dumps(list(queues)), "limit": int(limit), "now": time.time()}
        if AMBIENT.get() is None:
            # Nothing due: answer from a read, without a write transaction whose commit
            # would wake every waiter on the file, this process's own included.
            with self._read() as conn:
                if conn.execute(self._sql["claim_probe"], params).fetchone() is None:
                    return []
        with self._write() as conn:
            spent = conn.execute(self._sql["take_spent"], params).fetchall()
            if spent:
                self._bury(conn, spent, "attempts exhausted", params["now"])
            order = [r[0] for r in conn.execute(self._sql["claim_pick"], params)]
            if not order:
                return []
            params["ids"] = json.dumps(order)
            rows = {r[0]: r for r in conn.execute(self._sql["claim"], params)}
        # In the candidates' order (priority DESC, run_at, id), which RETURNING loses.
        # (revoked_at as is: "revoked_at IS NOT NULL" in this RETURNING read 1 for every
        # row on SQLite 3.40)
        return [Delivery(*rows[i][:11], rows[i][11] is not None) for i in order if i in rows]

    def has_due(self, queues: Sequence[str]) -> bool:
        params = {"queues": json.dumps(list(queues))}
        return self._one("claim_probe", params) is not None

    def ping(self) -> None:
        self._one("ping")

    def next_due(self, queues: Sequence[str]) -> float | None:
        row = self._one("next_due", {"queues": json.dumps(list(queues))})
        return row[0] if row else None

    def _bury(self, conn: sqlite3.Connection, rows: list[tuple], error: str, now: float) -> None:
        conn.executemany(self._sql["bury"], [(*r, now, error) for r in rows])

    @staticmethod
    def _held(held: list[Delivery]) -> str:
        return json.dumps([[d.id, d.token] for d in held])

    def _delete_held(self, held: list[Delivery]) -> set[int]:
        if not held:
            return set()
        return {r[0] for r in self._all("ack", {"held": self._held(held)})}

    def _extend_held(self, held: list[Delivery], extend: float | None) -> set[int]:
        if not held:
            return set()
        return {r[0] for r in self._all("heartbeat", {"held": self._held(held), "extend": extend})}

    def _pend_held(self, held: list[tuple[Delivery, float, int]]) -> set[int]:
        landed = set()
        now = time.time()
        with self._write() as conn:
            for d, delay, refund in held:
                row = conn.execute(
                    self._sql["pend"],
                    {"held": self._held([d]), "run_at": now + delay, "refund": refund, "now": now},
                ).fetchone()
                if row:
                    landed.add(row[0])
        return landed

    def _kill_held(self, held: list[Delivery], error: str) -> set[int]:
        if not held:
            return set()
        now = time.time()
        with self._write() as conn:
            rows = conn.execute(self._sql["take_held"], {"held": self._held(held), "now": now})
            rows = rows.fetchall()
            self._bury(conn, rows, error, now)
        return {r[0] for r in rows}

    # --------------------------------------------------------------- maintenance
    def sweep(self) -> SweepResult:
        now = time.time()
        with self._write() as conn:
            expired = conn.execute(self._sql["take_expired"], {"now": now}).fetchall()
            transient = {r[0] for r in conn.execute(self._sql["transient_queues"])}
            buried = [r for r in expired if r[1] not in transient]
            self._bury(conn, buried, "expired", now)
            purged = conn.execute(
                self._sql["purge_dead"],
                {"now": now, "retention": self.options.dead_letter_retention},
            ).rowcount
            dropped = conn.execute(
                self._sql["drop_queues"], {"now": now, "grace": self.options.queue_expiry_grace}
            )
            dropped = [r[0] for r in dropped]
            for name in dropped:
                conn.execute(self._sql["queue_delete_bindings"], {"name": name})
                conn.execute(self._sql["queue_delete_jobs"], {"name": name})
            if dropped:
                conn.execute(self._sql["bump_routing"])
        return SweepResult(len(buried), purged, tuple(dropped), len(expired) - len(buried))

    # -------------------------------------------------------------- reads, admin
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        names = json.dumps(list(queues)) if queues is not None else None
        return [QueueCounts(*r) for r in self._all("counts", {"queues": names})]

    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        return [Job(*r) for r in self._all("dead_list", {"queue": queue, "limit": int(limit)})]

    def _dead_filter(self, ids: Sequence[int] | None, queue: str | None) -> dict[str, Any]:
        return {"ids": None if ids is None else json.dumps([int(i) for i in ids]), "queue": queue}

    def dead_requeue(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        with self._write() as conn:
            rows = conn.execute(self._sql["dead_take"], self._dead_filter(ids, queue)).fetchall()
            conn.executemany(self._sql["dead_restore"], [(*r, time.time()) for r in rows])
        return len(rows)

    def dead_purge(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        return self._run("dead_purge", self._dead_filter(ids, queue))

    def dead_move(self, ids: Sequence[int], queue: str) -> int:
        validate_name(queue, "queue name")
        params = {"ids": json.dumps([int(i) for i in ids]), "to": queue, "now": time.time()}
        with self._write() as conn:
            conn.execute(self._sql["dead_move_copy"], params)
            return conn.execute(self._sql["dead_move_delete"], params).rowcount

    def _write_rates(self, rows: list[RatePoint]) -> None:
        data = [[r.queue, m, r.published, r.acked] for r in rows for m in (r.minute, TOTAL_MINUTE)]
        with self._write() as conn:
            conn.execute(self._sql["rates_add"], {"rows": json.dumps(data)})

    # ------------------------------------------------------------------- routing
    def exchange_declare(self, name: str, type_: str) -> None:
        validate_name(name, "exchange name")
        if type_ not in EXCHANGE_TYPES:
            raise ConfigurationError(f"exchange type {type_!r} is not one of {EXCHANGE_TYPES}")
        with self._write() as conn:
            if conn.execute(self._sql["exchange_declare"], {"name": name, "type": type_}).rowcount:
                conn.execute(self._sql["bump_routing"])

    def exchange_delete(self, name: str) -> None:
        with self._write() as conn:
            if conn.execute(self._sql["exchange_delete"], {"name": name}).rowcount:
                conn.execute(self._sql["exchange_unbind"], {"name": name})
                conn.execute(self._sql["bump_routing"])

    def _binding_change(self, key: str, exchange: str, routing_key: str, queue: str) -> None:
        with self._write() as conn:
            params = {"exchange": exchange, "rk": routing_key or "", "queue": queue}
            if conn.execute(self._sql[key], params).rowcount:
                conn.execute(self._sql["bump_routing"])

    def bind(self, exchange: str, routing_key: str, queue: str) -> None:
        validate_name(exchange, "exchange name")
        validate_name(queue, "queue name")
        if routing_key:
            validate_name(routing_key, "routing key")
        self._binding_change("bind", exchange, routing_key, queue)

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        self._binding_change("unbind", exchange, routing_key, queue)

    def queue_delete(self, name: str) -> int:
        with self._write() as conn:
            conn.execute(self._sql["queue_delete_row"], {"name": name})
            if conn.execute(self._sql["queue_delete_bindings"], {"name": name}).rowcount:
                conn.execute(self._sql["bump_routing"])
            return conn.execute(self._sql["queue_delete_jobs"], {"name": name}).rowcount

    def touch_queues(self, names: Sequence[str]) -> None:
        if names:
            self._run("touch_queues", {"names": json.dumps(list(names))})

    # ----------------------------------------------------------------- schedules
    @contextmanager
    def schedule_tick(self) -> Iterator[Any]:
        # BEGIN IMMEDIATE holds the database write lock: the whole tick is the row lock.
        with self._write() as conn:
            token = AMBIENT.set(conn)
            try:
                yield ScheduleTick(self._sql, conn)
            finally:
                AMBIENT.reset(token)

    # -------------------------------------------------------------------- wakeup
    def waiter(self) -> Waiter:
        return SQLiteWaiter(self.path, self.options.busy_timeout)

    # ------------------------------------------------------ transactional publish
    def _adopt(self, connection: Any) -> sqlite3.Connection:
        if connection is self._db:
            return connection
        from .adopt import driver_connection as _driver_connection

        conn = _driver_connection(connection)
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigurationError(
                f"transaction(): {type(connection).__name__} is not an sqlite3 connection, "
                f"but the broker is {self.url.masked()}"
            )
        row = conn.execute("PRAGMA database_list").fetchone()
        theirs = os.path.realpath(row[2]) if row and row[2] else "(in memory)"
        if theirs != os.path.realpath(self.path):
            raise ConfigurationError(
                f"transaction(): the connection is to {theirs!r}, but the broker is "
                f"{self.url.masked()}; publish through a connection to the broker's file"
            )
        if not conn.in_transaction and _autocommits(conn):
            raise ConfigurationError(
                "transaction(): the sqlite3 connection is in autocommit mode with no "
                "transaction open, so a publish would commit at once; open a transaction "
                "first (`BEGIN`, or leave isolation_level at its default; Django: "
                "`transaction.atomic()`)"
            )
        return conn


def _autocommits(conn: sqlite3.Connection) -> bool:
    """True when a statement outside an explicit transaction commits by itself."""
    mode = getattr(conn, "autocommit", None)  # Python 3.12+: True/False, or legacy (-1)
    if mode is True or mode is False:
        return mode
    return conn.isolation_level is None


def _with_now(params: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(params or {})
    out.setdefault("now", time.time())
    check_text_params(out)
    return out


class SQLiteWaiter(Waiter):
    """Polls ``PRAGMA data_version`` on its own connection: it changes on others' commits."""

    interval = 0.005

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._conn = sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._version = self._read()

    def _read(self) -> int:
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def fileno(self) -> int | None:
        return None

    def poll(self) -> Wakeup:
        version = self._read()
        changed, self._version = version != self._version, version
        return Wakeup(any=changed)

    def wait(self, timeout: float) -> Wakeup:
        end = time.monotonic() + max(timeout, 0)
        while True:
            wake = self.poll()
            if wake or time.monotonic() >= end:
                return wake
            time.sleep(min(self.interval, max(end - time.monotonic(), 0)))

    def close(self) -> None:
        self._conn.close()


_SQL: dict[str, str] = {
    "version": "SELECT value FROM {meta} WHERE key = 'schema_version'",
    "insert": """
INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                    visibility_timeout, backoff_base, created_at)
VALUES (:queue, :msg_id, :body, :priority, :run_at,
  COALESCE(:expires_at, :now + (SELECT message_ttl FROM {queues} WHERE name = :queue)),
  COALESCE(:ma, (SELECT max_attempts FROM {queues} WHERE name = :queue), :d_ma),
  COALESCE(:vt, (SELECT visibility_timeout FROM {queues} WHERE name = :queue), :d_vt),
  COALESCE(:bb, (SELECT backoff_base FROM {queues} WHERE name = :queue), :d_bb),
  :now)
RETURNING id""",
    "take_spent": f"""
DELETE FROM {{jobs}}
WHERE {_IN_ACTIVE} AND state = 'processing' AND run_at <= :now AND attempts >= max_attempts
RETURNING {_DEAD_COLS}""",
    "bury": f"""
INSERT INTO {{dead}} ({_DEAD_COLS}, died_at, last_error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
    "claim_probe": f"""
SELECT 1 FROM {{jobs}} WHERE {_IN_ACTIVE} AND run_at <= :now LIMIT 1""",
    "claim_pick": f"""
SELECT id FROM {{jobs}}
WHERE {_IN_ACTIVE} AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
  AND attempts < max_attempts
ORDER BY priority DESC, run_at, id
LIMIT :limit""",
    "claim": """
UPDATE {jobs}
SET state = 'processing', attempts = attempts + 1, token = random(),
    deadline = :now + visibility_timeout, run_at = :now + visibility_timeout
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, token, queue, body, priority, attempts, max_attempts, backoff_base, deadline,
          msg_id, visibility_timeout, revoked_at""",
    "ping": "SELECT 1",
    "size": "SELECT count(*) FROM {jobs} WHERE queue = :queue AND state = 'pending'",
    # min(run_at) of the pending jobs, by a loose index scan of the claim index: one
    # seek per priority present in each queue, not a scan of every pending row.
    "next_due": """
WITH RECURSIVE prio(queue, p) AS (
  SELECT qn.value, (SELECT priority FROM {jobs} WHERE queue = qn.value
                    ORDER BY priority DESC LIMIT 1)
  FROM json_each(:queues) AS qn WHERE qn.value NOT IN (SELECT queue FROM {paused_queues})
  UNION ALL
  SELECT prio.queue, (SELECT j.priority FROM {jobs} j WHERE j.queue = prio.queue
                      AND j.priority < prio.p ORDER BY j.priority DESC LIMIT 1)
  FROM prio WHERE prio.p IS NOT NULL
)
SELECT min((SELECT j.run_at FROM {jobs} j
            WHERE j.queue = prio.queue AND j.priority = prio.p AND j.state = 'pending'
              AND (j.expires_at IS NULL OR j.expires_at > :now)
            ORDER BY j.run_at LIMIT 1))
FROM prio WHERE prio.p IS NOT NULL""",
    "ack": f"DELETE FROM {{jobs}} WHERE {_HELD} RETURNING id",
    "heartbeat": f"""
UPDATE {{jobs}}
SET deadline = :now + COALESCE(:extend, visibility_timeout),
    run_at = :now + COALESCE(:extend, visibility_timeout)
WHERE {_HELD} RETURNING id""",
    "pend": f"""
UPDATE {{jobs}}
SET state = 'pending', token = NULL, deadline = NULL, run_at = :run_at,
    attempts = attempts - :refund
WHERE {_HELD} RETURNING id""",
    "take_held": f"DELETE FROM {{jobs}} WHERE {_HELD} RETURNING {_DEAD_COLS}",
    # Expiry is about starting: a running job (a live claim) is left to finish.
    "take_expired": f"""
DELETE FROM {{jobs}} WHERE expires_at IS NOT NULL AND expires_at <= :now
  AND (state = 'pending' OR deadline <= :now)
RETURNING {_DEAD_COLS}""",
    # Expired messages of these (event and reply queues) are dropped, not dead-lettered.
    "transient_queues": """
SELECT name FROM {queues} WHERE expires IS NOT NULL OR message_ttl IS NOT NULL""",
    "purge_dead": """
DELETE FROM {dead}
WHERE died_at < :now - COALESCE(
  (SELECT dead_letter_retention FROM {queues} q WHERE q.name = {dead}.queue), :retention)""",
    "drop_queues": """
DELETE FROM {queues} WHERE expires IS NOT NULL AND last_used + max(expires, :grace) < :now
RETURNING name""",
    "get_job_by_id": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}} WHERE id = :id
UNION ALL SELECT {_DEAD_READ} FROM {{dead}} WHERE id = :id""",
    "get_job_by_msg": f"""
SELECT * FROM (SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}} WHERE msg_id = :id
               ORDER BY id DESC LIMIT 1)
UNION ALL
SELECT * FROM (SELECT {_DEAD_READ} FROM {{dead}} WHERE msg_id = :id
               ORDER BY died_at DESC LIMIT 1)
LIMIT 1""",
    "counts": """
WITH wanted AS (SELECT value AS queue FROM json_each(:queues)),
live AS (
  SELECT queue,
         sum(state = 'pending' AND run_at <= :now) AS pending,
         sum(state = 'pending' AND run_at > :now) AS delayed,
         sum(state = 'processing') AS processing,
         :now - min(CASE WHEN state = 'pending' AND run_at <= :now THEN created_at END) AS age
  FROM {jobs} WHERE :queues IS NULL OR queue IN (SELECT queue FROM wanted)
  GROUP BY queue
),
dl AS (
  SELECT queue, count(*) AS dead FROM {dead}
  WHERE :queues IS NULL OR queue IN (SELECT queue FROM wanted) GROUP BY queue
),
names AS (SELECT queue FROM live UNION SELECT queue FROM dl UNION SELECT queue FROM wanted)
SELECT n.queue, COALESCE(live.pending, 0), COALESCE(live.delayed, 0),
       COALESCE(live.processing, 0), COALESCE(dl.dead, 0), live.age
FROM names n LEFT JOIN live ON live.queue = n.queue LEFT JOIN dl ON dl.queue = n.queue
ORDER BY n.queue""",
    "purge": "DELETE FROM {jobs} WHERE queue = :queue AND state = 'pending'",
    "dead_list": f"""
SELECT {_DEAD_READ} FROM {{dead}} WHERE :queue IS NULL OR queue = :queue
ORDER BY died_at DESC, id DESC LIMIT :limit""",
    "dead_take": """
DELETE FROM {dead}
WHERE (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:queue IS NULL OR queue = :queue)
RETURNING id, queue, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base,
          created_at""",
    "dead_restore": """
INSERT INTO {jobs} (id, queue, msg_id, body, priority, max_attempts, visibility_timeout,
                    backoff_base, created_at, run_at, attempts)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)""",
    "revoke": """
UPDATE {jobs} SET revoked_at = :now
WHERE msg_id IN (SELECT value FROM json_each(:ids)) AND revoked_at IS NULL""",
    "revoked_among": """
SELECT id FROM {jobs}
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND revoked_at IS NOT NULL""",
    "scheduled": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}}
WHERE state = 'pending' AND run_at > :now AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at, id LIMIT :limit""",
    "dead_explain": """
UPDATE {dead} SET last_error = :error WHERE msg_id = :msg_id AND last_error = :was""",
    "dead_purge": """
DELETE FROM {dead}
WHERE (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:queue IS NULL OR queue = :queue)""",
    "bump_routing": """
UPDATE {meta} SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routing_version'""",
    "exchange_declare": """
INSERT INTO {exchanges} (name, type) VALUES (:name, :type)
ON CONFLICT (name) DO UPDATE SET type = excluded.type WHERE {exchanges}.type != excluded.type""",
    "exchange_type": "SELECT type FROM {exchanges} WHERE name = :name",
    "exchange_delete": "DELETE FROM {exchanges} WHERE name = :name",
    "exchange_unbind": "DELETE FROM {bindings} WHERE exchange = :name",
    "bind": """
INSERT INTO {bindings} (exchange, routing_key, queue) VALUES (:exchange, :rk, :queue)
ON CONFLICT DO NOTHING""",
    "unbind": """
DELETE FROM {bindings} WHERE exchange = :exchange AND routing_key = :rk AND queue = :queue""",
    "bindings": "SELECT routing_key, queue FROM {bindings} WHERE exchange = :exchange",
    "routing_version": "SELECT value FROM {meta} WHERE key = 'routing_version'",
    "queue_declare": """
INSERT INTO {queues} (name, message_ttl, expires, last_used) VALUES (:name, :ttl, :expires, :now)
ON CONFLICT (name) DO UPDATE SET message_ttl = excluded.message_ttl,
  expires = excluded.expires, last_used = excluded.last_used""",
    "queue_exists": "SELECT 1 FROM {queues} WHERE name = :name",
    "queue_delete_row": "DELETE FROM {queues} WHERE name = :name",
    "queue_delete_bindings": "DELETE FROM {bindings} WHERE queue = :name",
    "queue_delete_jobs": "DELETE FROM {jobs} WHERE queue = :name",
    "touch_queues": """
UPDATE {queues} SET last_used = :now WHERE name IN (SELECT value FROM json_each(:names))""",
    "lease_acquire": """
INSERT INTO {leases} (name, owner, expires_at) VALUES (:name, :owner, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE {leases}.owner = excluded.owner OR {leases}.expires_at <= :now
RETURNING owner""",
    "lease_release": "DELETE FROM {leases} WHERE name = :name AND owner = :owner",
    "lease_holder": "SELECT owner FROM {leases} WHERE name = :name AND expires_at > :now",
    # Beat schedules. An upsert keeps the lifecycle columns (enabled, last run, run count,
    # last error, a pending run-now) and, with "keep", the stored next_at while the kind,
    # spec and time zone are unchanged (the grid survives restarts and other edits).
    "schedule_upsert": """
INSERT INTO {schedules} (name, spec, interval, task, args, kwargs, options, next_at, origin,
                          kind, tz, updated_at)
VALUES (:name, :spec, :interval, :task, :args, :kwargs, :options,
        :next_at, :origin, :kind, :tz, :now)
ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, interval = excluded.interval,
  task = excluded.task, args = excluded.args, kwargs = excluded.kwargs,
  options = excluded.options, origin = excluded.origin, updated_at = excluded.updated_at,
  kind = excluded.kind, tz = excluded.tz,
  next_at = CASE WHEN :keep AND ({schedules}.kind, {schedules}.spec, {schedules}.tz)
                                 = (excluded.kind, excluded.spec, excluded.tz)
                 THEN {schedules}.next_at ELSE excluded.next_at END""",
    "schedule_delete": "DELETE FROM {schedules} WHERE name = :name",
    "schedule_list": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules} ORDER BY name""",
    "schedule_get": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules} WHERE name = :name""",
    # The clock "due" is measured against: a SQLite file's is its host's (every process
    # on the file shares that host), so this is that host's time.
    "schedule_clock": "SELECT :now",
    "schedule_due": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules}
WHERE (enabled AND next_at <= :now) OR run_requested IS NOT NULL
ORDER BY next_at, name""",
    # One boundary fired: the next one, guarded by the one fired (a second ticker's
    # advance of the same boundary matches no row).
    "schedule_advance": """
UPDATE {schedules} SET next_at = :new, last_run_at = :now, run_count = run_count + 1,
  last_error = NULL
WHERE name = :name AND next_at = :prev""",
    # Missed boundaries beyond the catch-up limit: skipped, not counted as runs.
    "schedule_skip": """
UPDATE {schedules} SET next_at = :new WHERE name = :name AND next_at = :prev""",
    "schedule_ran_now": """
UPDATE {schedules} SET run_requested = NULL, last_run_at = :now,
  run_count = run_count + 1, last_error = NULL
WHERE name = :name AND run_requested = :requested""",
    "schedule_failed": """
UPDATE {schedules} SET last_error = :error WHERE name = :name""",
    "schedule_run_now": """
UPDATE {schedules} SET run_requested = COALESCE(run_requested, :now) WHERE name = :name""",
    "schedule_disable": "UPDATE {schedules} SET enabled = false WHERE name = :name",
    # Re-enabled: the next boundary on the same grid after now (computed by the caller).
    "schedule_enable": """
UPDATE {schedules} SET enabled = true, next_at = :new
WHERE name = :name AND next_at = :prev""",
    # ---- pause/resume and the dashboard's reads (kombu_alkstore.web)
    "queue_pause": """
INSERT INTO {paused_queues} (queue, paused_at) VALUES (:name, :now)
ON CONFLICT (queue) DO NOTHING RETURNING queue""",
    # The commit changes data_version, which wakes every waiter on the file.
    "queue_resume": "DELETE FROM {paused_queues} WHERE queue = :name RETURNING queue",
    "paused_list": "SELECT queue, paused_at FROM {paused_queues} ORDER BY queue",
    "peek": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}}
WHERE queue = :queue AND state = 'pending'
ORDER BY priority DESC, run_at, id LIMIT :limit""",
    "dead_search": f"""
SELECT {_DEAD_READ} FROM {{dead}}
WHERE {_DEAD_WHERE} AND (:b_at IS NULL OR (died_at, id) < (:b_at, :b_id))
ORDER BY died_at DESC, id DESC LIMIT :limit""",
    "dead_search_window": f"""
SELECT {_DEAD_READ} FROM (
  SELECT * FROM {{dead}} WHERE :b_at IS NULL OR (died_at, id) < (:b_at, :b_id)
  ORDER BY died_at DESC, id DESC LIMIT :scan
)
WHERE {_DEAD_WHERE}
ORDER BY died_at DESC, id DESC LIMIT :limit""",
    # The last row of a window, if any row follows it (else the search is complete).
    "dead_window": """
SELECT died_at, id FROM {dead} WHERE :b_at IS NULL OR (died_at, id) < (:b_at, :b_id)
ORDER BY died_at DESC, id DESC LIMIT 2 OFFSET :scan - 1""",
    "dead_count": f"""
SELECT count(*) FROM (SELECT 1 FROM {{dead}} WHERE {_DEAD_WHERE} LIMIT coalesce(:cap, -1))""",
    "dead_ids": f"""
SELECT id FROM {{dead}} WHERE {_DEAD_WHERE} AND id > :after ORDER BY id LIMIT :limit""",
    "dead_move_copy": """
INSERT INTO {jobs} (id, queue, msg_id, body, priority, max_attempts, visibility_timeout,
                    backoff_base, created_at, run_at, attempts)
SELECT id, :to, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base,
       created_at, :now, 0
FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids))""",
    "dead_move_delete": "DELETE FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids))",
    "claim_stats": """
WITH p AS (
  SELECT queue, count(*) AS n, min(created_at) AS oldest, min(deadline) AS deadline
  FROM {jobs} WHERE state = 'processing' GROUP BY queue
),
w AS (SELECT '' AS queue, 0 AS offers, 0 AS slots WHERE 0),  -- no hand-off on SQLite
names AS (SELECT queue FROM p UNION SELECT queue FROM w)
SELECT n.queue, COALESCE(p.n, 0), p.oldest, p.deadline, COALESCE(w.offers, 0),
       COALESCE(w.slots, 0)
FROM names n LEFT JOIN p ON p.queue = n.queue LEFT JOIN w ON w.queue = n.queue
ORDER BY n.queue""",
    "rates_add": """
INSERT INTO {rates} (queue, minute, published, acked)
SELECT value->>0, value->>1, sum(value->>2), sum(value->>3) FROM json_each(:rows)
GROUP BY value->>0, value->>1
ON CONFLICT (queue, minute) DO UPDATE
SET published = published + excluded.published, acked = acked + excluded.acked""",
    "rates_since": """
SELECT queue, minute, published, acked FROM {rates}
WHERE minute >= :since AND minute > 0 ORDER BY minute, queue""",
    "rates_totals": """
SELECT queue, minute, published, acked FROM {rates} WHERE minute = :total ORDER BY queue""",
    "rates_trim": "DELETE FROM {rates} WHERE minute < :before AND minute > 0",
}
