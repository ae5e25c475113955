"""The SQLite store: one WAL-mode file shared by the processes of one host.

Writes take the database lock up front (``BEGIN IMMEDIATE``) and wait for it up to the
busy timeout; a claim is one ``UPDATE … RETURNING``. Wake-ups poll ``PRAGMA data_version``
(see ``waiter.py``). Every statement is named in ``queries.sql``.
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

from ...errors import ConfigurationError, SchemaMissing, StoreUnavailable
from ..acts import ACT_STATEMENTS, Actor, Run
from ..admin import TOTAL_MINUTE, RatePoint
from ..adopt import driver_connection
from ..ambient import AMBIENT
from ..interface import Store
from ..options import StoreOptions, StoreURL, check_text_params, validate_name
from ..schedules import ScheduleTick
from ..schema import SCHEMA_VERSION, migrations, require_current
from ..sqlfile import load_queries
from ..statements import STATEMENTS
from ..values import (
    EXCHANGE_TYPES,
    MAINTENANCE_JOBS,
    Capabilities,
    Delivery,
    Job,
    MaintenanceResult,
    NewJob,
    QueueCounts,
    Row,
)
from .connection import MappedConnection, autocommits, connect, execute
from .engine import ENGINE
from .waiter import SQLiteWaiter

#: The statements this engine runs itself, beyond the base class's.
_OWN_STATEMENTS = frozenset(
    [
        "open_wal",
        "open_synchronous",
        "begin",
        "commit",
        "rollback",
        "data_version",
        "database_file",
        "table_exists",
        "version",
        "ping",
        "insert",
        "insert_unique",
        "claim_probe",
        "take_spent",
        "bury",
        "claim_pick",
        "claim_pick_limited",
        "limited_queues",
        "rate_log",
        "rate_trim",
        "rate_wait_set",
        "fair_advance",
        "claim",
        "next_due",
        "ack",
        "heartbeat",
        "pend",
        "take_held",
        "expire_bury",
        "expire_delete",
        "lapsed_bury",
        "lapsed_delete",
        "retention",
        "revokes_gone",
        "expired_queues",
        "expired_queues_bindings",
        "expired_queues_jobs",
        "expired_queues_rates",
        "counts",
        "dead_list",
        "dead_requeue",
        "dead_purge",
        "dead_move_copy",
        "dead_move_delete",
        "rates_add",
        "bump_routing",
        "exchange_declare",
        "exchange_delete",
        "exchange_unbind",
        "bind",
        "unbind",
        "queue_delete_row",
        "queue_delete_bindings",
        "queue_delete_jobs",
        "queue_delete_rates",
        "touch_queues",
    ]
)


class SQLiteStore(Store):
    """The store in one SQLite file (WAL mode), safe for several processes on one host."""

    engine = ENGINE.name  # as the package describes itself (engine.py)
    # No listener (the waiter polls), no hand-off, no claim session, publishes confirmed
    # as they commit; a caller's open transaction holds the file's only write lock, so
    # declarations join it.
    capabilities = Capabilities()
    connection_errors = (StoreUnavailable, sqlite3.OperationalError)
    database_errors = (StoreUnavailable, sqlite3.Error)

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not options.setup and not os.path.exists(url.path or ""):
            # Opening it would create an empty file where the path was mistyped.
            raise SchemaMissing(
                f"the alkstore tables are missing in {url.path!r} (prefix "
                f"{options.schema!r}): that SQLite database does not exist; check the path, "
                "or create it with `kombu-alkstore setup`"
            )
        super().__init__(url, options)
        self.path = url.path
        self._pid = os.getpid()
        self._lock = threading.RLock()
        #: Every statement, rendered (see ``queries.sql``).
        self._sql = load_queries(
            __package__,
            ("queries.sql", "acts.sql"),
            self.names,
            required=STATEMENTS | _OWN_STATEMENTS | ACT_STATEMENTS,
        )
        try:
            self._db = connect(
                self.path,
                options.busy_timeout,
                on_open=(self._sql["open_wal"], self._sql["open_synchronous"]),
            )
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
            self._begin()
            try:
                yield self._db
            except BaseException:
                self._db.execute(self._sql["rollback"])
                raise
            self._db.execute(self._sql["commit"])

    def _begin(self) -> None:
        """BEGIN IMMEDIATE: the write lock, waited for ``busy_timeout`` seconds. Still
        held then: StoreUnavailable saying who may hold it (a retry may succeed)."""
        try:
            self._db.execute(self._sql["begin"])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            raise StoreUnavailable(
                f"the broker's SQLite file {self.url.path} stayed locked for "
                f"busy_timeout={self.options.busy_timeout:g} s: another connection holds a "
                "write transaction on it. If it is your own (a Django or SQLAlchemy "
                "transaction on this file), publish inside it: kombu_alkstore.django.atomic() "
                "or kombu_alkstore.transaction(conn)"
            ) from exc

    def _exec(self, conn: sqlite3.Connection, key: str, params: dict[str, Any] | None = None):
        """Statement ``key`` on ``conn``, rows as mappings; ``:now`` is bound unless
        given. (Parameters as given: :meth:`_all`, :meth:`_one` and :meth:`_run` check
        the text ones, the engine's own calls bind values already checked.)"""
        if params is None or "now" not in params:
            params = {**(params or {}), "now": time.time()}
        if conn is self._db:  # the store's own: its row factory gives mappings
            return conn.execute(self._sql[key], params)
        return execute(conn, self._sql[key], params)

    @staticmethod
    def _array(values: list[Any]) -> str:
        return json.dumps(values)

    @contextmanager
    def _transaction(self) -> Iterator[Run]:
        """One write transaction (the caller's, when one is bound); yields a function
        running a named statement in it, all its rows."""
        with self._write() as conn:
            now = time.time()  # once the write lock is ours

            def run(key: str, params: dict[str, Any] | None = None) -> list[Row]:
                return self._exec(conn, key, _with_now({"now": now, **(params or {})})).fetchall()

            yield run

    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[Row]:
        with self._read() as conn:
            return self._exec(conn, key, _with_now(params)).fetchall()

    def _one(self, key: str, params: dict[str, Any] | None = None) -> Row | None:
        with self._read() as conn:
            return self._exec(conn, key, _with_now(params)).fetchone()

    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        with self._read() as conn:  # a single statement is its own transaction
            return self._exec(conn, key, _with_now(params)).rowcount

    def close(self) -> None:
        self.closed = True
        if os.getpid() == self._pid:
            self.rates_tally.close()
            with self._lock:
                self._db.close()

    # --------------------------------------------------------------------- setup
    def setup(self) -> None:
        if self.schema_version() == SCHEMA_VERSION:
            return  # up to date: no DDL, no write lock
        with self._write() as conn:
            # Read under the write lock: a concurrent setup may have migrated it already.
            stored = self._stored_version(conn)
            migrations(self.options.schema, self.engine).apply(conn.execute, stored)

    def schema_version(self) -> int | None:
        with self._read() as conn:
            return self._stored_version(conn)

    def _stored_version(self, conn: sqlite3.Connection) -> int | None:
        if not self._exec(conn, "table_exists", {"table": self.tables.meta.name}).fetchone():
            return None
        row = self._exec(conn, "version").fetchone()
        return int(row["value"]) if row else None

    # ------------------------------------------------------------------- enqueue
    def _insert(self, jobs: list[NewJob]) -> list[int | None]:
        ids: list[int | None] = []
        with self._write() as conn:
            now = time.time()  # once the write lock is ours: the wait for it is not delay
            for j in jobs:
                run_at = now + j.delay if j.delay is not None else (j.run_at or now)
                params = {**self._job_params(j), "run_at": run_at, "now": now}
                if j.unique_key is None:
                    ids.append(self._exec(conn, "insert", params).fetchone()["id"])
                else:  # no row: a live job holds the key (the write lock orders them)
                    row = self._exec(conn, "insert_unique", params).fetchone()
                    ids.append(row["id"] if row else None)
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
                if self._exec(conn, "claim_probe", params).fetchone() is None:
                    return []
        with self._write() as conn:
            # The time the lock was ours, not before waiting for it up to busy_timeout:
            # a claim stamped before the wait would be born with its deadline passed.
            params["now"] = time.time()
            spent = self._exec(conn, "take_spent", params).fetchall()
            if spent:
                self._bury(conn, spent, "attempts exhausted", params["now"])
            # A queue with a concurrency limit: the statement that counts (docs/flow-control.md).
            limited = self._exec(conn, "limited_queues", params).fetchone() is not None
            pick = "claim_pick_limited" if limited else "claim_pick"
            picked = {r["id"]: bool(r["revoked"]) for r in self._exec(conn, pick, params)}
            order = list(picked)
            params["ids"] = json.dumps(order)
            rows = {r["id"]: r for r in self._exec(conn, "claim", params)} if order else {}
            if limited:  # a queue with a rate: log the claims, note a throttled queue
                self._exec(conn, "rate_trim", params)
                self._exec(conn, "rate_log", params)
                self._exec(conn, "rate_wait_set", params)
                if order:  # a fair queue: its groups' passes
                    self._exec(conn, "fair_advance", params)
            if not order:
                return []
        # In the candidates' order (priority DESC, run_at, id), which RETURNING loses.
        return [Delivery(**rows[i], revoked=picked[i]) for i in order if i in rows]

    def has_due(self, queues: Sequence[str]) -> bool:
        params = {"queues": json.dumps(list(queues))}
        return self._one("claim_probe", params) is not None

    def ping(self) -> None:
        self._one("ping")

    def next_due(self, queues: Sequence[str]) -> float | None:
        return self._value("next_due", {"queues": json.dumps(list(queues))})

    def _bury(self, conn: sqlite3.Connection, rows: list[Row], error: str, now: float) -> None:
        """Rows of ``dead_columns`` (taken out of the queue) into the dead letters."""
        conn.executemany(self._sql["bury"], [{**r, "now": now, "error": error} for r in rows])

    @staticmethod
    def _held(held: list[Delivery]) -> str:
        return json.dumps([[d.id, d.token] for d in held])

    def _delete_held(self, held: list[Delivery]) -> set[int]:
        if not held:
            return set()
        return set(self._column("ack", {"held": self._held(held)}))

    def _extend_held(self, held: list[Delivery], extend: float | None) -> set[int]:
        if not held:
            return set()
        # In a write transaction, so that ``now`` (judging and extending the claims) is
        # bound once the lock is ours, not before a wait for it.
        with self._write() as conn:
            params = {"held": self._held(held), "extend": extend, "now": time.time()}
            return {r["id"] for r in self._exec(conn, "heartbeat", params)}

    def _pend_held(self, held: list[tuple[Delivery, float, int]]) -> set[int]:
        landed = set()
        with self._write() as conn:
            now = time.time()
            for d, delay, refund in held:
                params = {"held": self._held([d]), "run_at": now + delay, "refund": refund}
                row = self._exec(conn, "pend", {**params, "now": now}).fetchone()
                if row:
                    landed.add(row["id"])
        return landed

    def _kill_held(self, held: list[Delivery], error: str) -> set[int]:
        if not held:
            return set()
        with self._write() as conn:
            now = time.time()
            rows = self._exec(conn, "take_held", {"held": self._held(held), "now": now})
            rows = rows.fetchall()
            self._bury(conn, rows, error, now)
        return {r["id"] for r in rows}

    # --------------------------------------------------------------- maintenance
    def maintain(self, job: str) -> MaintenanceResult:
        if job not in MAINTENANCE_JOBS:
            raise ConfigurationError(f"unknown maintenance job {job!r}: {MAINTENANCE_JOBS}")
        if job == "dead_offers":
            return MaintenanceResult(job)  # no hand-off offers on SQLite
        batch = self.options.maintenance_batch
        params = {
            "retention": self.options.dead_letter_retention,
            "grace": self.options.queue_expiry_grace,
            "batch": batch,
        }
        with self._write() as conn:
            params["now"] = time.time()
            if job == "expire":
                buried = self._exec(conn, "expire_bury", params).rowcount
                gone = self._exec(conn, "expire_delete", params).rowcount
                return MaintenanceResult(
                    job, count=buried, dropped=gone - buried, more=gone >= batch
                )
            if job == "lapsed":
                self._exec(conn, "lapsed_bury", params)
                gone = self._exec(conn, "lapsed_delete", params).rowcount
                return MaintenanceResult(job, count=gone, more=gone >= batch)
            if job == "retention":
                revoked = self._exec(conn, "revokes_gone", params).rowcount
                gone = self._exec(conn, "retention", params).rowcount
                return MaintenanceResult(job, count=gone, more=max(gone, revoked) >= batch)
            # expired_queues (not batched: the queues are few, their jobs go with them)
            names = sorted(r["name"] for r in self._exec(conn, "expired_queues", params))
            if names:
                params["names"] = json.dumps(names)
                self._exec(conn, "expired_queues_bindings", params)
                self._exec(conn, "expired_queues_jobs", params)
                self._exec(conn, "expired_queues_rates", params)
                self._exec(conn, "bump_routing")
            return MaintenanceResult(job, count=len(names), queues=tuple(names))

    # -------------------------------------------------------------- reads, admin
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        names = json.dumps(list(queues)) if queues is not None else None
        return [QueueCounts(**r) for r in self._all("counts", {"queues": names})]

    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        return [Job(**r) for r in self._all("dead_list", {"queue": queue, "limit": int(limit)})]

    def _dead_pick(self, ids: Sequence[int] | None, queue: str | None) -> dict[str, Any]:
        return {"ids": None if ids is None else json.dumps([int(i) for i in ids]), "queue": queue}

    def dead_requeue(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        params = self._dead_pick(ids, queue)

        def change(run: Run) -> list[Row]:
            run("dead_requeue", params)
            return run("dead_purge", params)  # the rows copied, as the write lock keeps them

        return sum(g.count or 0 for g in self._acting("dead_requeue", actor, change))

    def dead_purge(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        params = self._dead_pick(ids, queue)
        done = self._acting("dead_purge", actor, lambda run: run("dead_purge", params))
        return sum(g.count or 0 for g in done)

    def dead_move(self, ids: Sequence[int], queue: str, actor: Actor | None = None) -> int:
        validate_name(queue, "queue name")
        params = {"ids": json.dumps([int(i) for i in ids]), "to": queue}

        def change(run: Run) -> list[Row]:
            run("dead_move_copy", params)
            return run("dead_move_delete", params)

        done = self._acting("dead_move", actor, change, target=queue)
        return sum(g.count or 0 for g in done)

    def _write_rates(self, rows: list[RatePoint]) -> None:
        data = [[r.queue, m, r.published, r.acked] for r in rows for m in (r.minute, TOTAL_MINUTE)]
        with self._write() as conn:
            self._exec(conn, "rates_add", {"rows": json.dumps(data)})

    # ------------------------------------------------------------------- routing
    def _changed(self, conn: sqlite3.Connection, key: str, params: dict[str, Any]) -> bool:
        """Statement ``key`` changed exchanges or bindings: a new routing version."""
        if self._exec(conn, key, params).rowcount:
            self._exec(conn, "bump_routing")
            return True
        return False

    def exchange_declare(self, name: str, type_: str) -> None:
        validate_name(name, "exchange name")
        if type_ not in EXCHANGE_TYPES:
            raise ConfigurationError(f"exchange type {type_!r} is not one of {EXCHANGE_TYPES}")
        with self._write() as conn:
            self._changed(conn, "exchange_declare", {"name": name, "type": type_})

    def exchange_delete(self, name: str) -> None:
        with self._write() as conn:
            if self._exec(conn, "exchange_delete", {"name": name}).rowcount:
                self._exec(conn, "exchange_unbind", {"name": name})
                self._exec(conn, "bump_routing")

    def _binding_change(self, key: str, exchange: str, routing_key: str, queue: str) -> None:
        with self._write() as conn:
            params = {"exchange": exchange, "rk": routing_key or "", "queue": queue}
            self._changed(conn, key, params)

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
            self._exec(conn, "queue_delete_row", {"name": name})
            self._changed(conn, "queue_delete_bindings", {"name": name})
            self._exec(conn, "queue_delete_rates", {"name": name})
            return self._exec(conn, "queue_delete_jobs", {"name": name}).rowcount

    def touch_queues(self, names: Sequence[str]) -> set[str]:
        if not names:
            return set()
        return set(self._column("touch_queues", {"names": json.dumps(list(names))}))

    # ----------------------------------------------------------------- schedules
    @contextmanager
    def schedule_tick(self) -> Iterator[Any]:
        # BEGIN IMMEDIATE holds the database write lock: the whole tick is the row lock.
        with self._write() as conn:
            token = AMBIENT.set(conn)
            try:
                yield ScheduleTick(self._sql, MappedConnection(conn))
            finally:
                AMBIENT.reset(token)

    # ------------------------------------------------------------------- results
    def _new_results(self) -> Any:
        from .results import SQLiteResults

        return SQLiteResults(self)

    # -------------------------------------------------------------------- wakeup
    def waiter(self) -> SQLiteWaiter:
        return SQLiteWaiter(self.path, self.options.busy_timeout, self._sql["data_version"])

    # ------------------------------------------------------ transactional publish
    def _adopt(self, connection: Any) -> sqlite3.Connection:
        if connection is self._db:
            return connection
        conn = driver_connection(connection)
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigurationError(
                f"transaction(): {type(connection).__name__} is not an sqlite3 connection, "
                f"but the broker is {self.url.masked()}"
            )
        row = execute(conn, self._sql["database_file"]).fetchone()
        theirs = os.path.realpath(row["file"]) if row and row["file"] else "(in memory)"
        if theirs != os.path.realpath(self.path):
            raise ConfigurationError(
                f"transaction(): the connection is to {theirs!r}, but the broker is "
                f"{self.url.masked()}; publish through a connection to the broker's file"
            )
        if not conn.in_transaction and autocommits(conn):
            raise ConfigurationError(
                "transaction(): the sqlite3 connection is in autocommit mode with no "
                "transaction open, so a publish would commit at once; open a transaction "
                "first (`BEGIN`, or leave isolation_level at its default; Django: "
                "`transaction.atomic()`)"
            )
        return conn


def _with_now(params: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(params or {})
    out.setdefault("now", time.time())
    check_text_params(out)
    return out
