"""PostgreSQL engine: psycopg 3 with a connection pool, ``FOR UPDATE SKIP LOCKED`` claims
and ``LISTEN/NOTIFY`` wake-ups (payload: ``[run_at, queue]`` as JSON)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import select
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from ..errors import ConfigurationError, StoreUnavailable
from .admin import TOTAL_MINUTE, RatePoint
from .async_session import AsyncSession
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
from .options import StoreOptions, StoreURL, check_text_params, parse_store_url, validate_name
from .pipeline import PipelinedPublisher
from .schema import SCHEMA_VERSION, require_current

T = TypeVar("T")
#: Seconds a statement waits for a pooled connection (the database may be down).
POOL_TIMEOUT = 10.0
#: ... and a connection check, which should fail fast so kombu's retry backoff applies.
PING_TIMEOUT = 3.0
#: Statements run on the pool that does not wait for the WAL flush (see __init__).
_FAST_KEYS = ("claim_one", "claim_any", "ack", "heartbeat", "pend", "kill", "sweep", "touch_queues")
NOW = "extract(epoch FROM statement_timestamp())::float8"
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
# The validity predicate of every operation on a claim: right token, deadline not passed.
_HELD = f"j.id = h.id AND j.token = h.token AND j.state = 'processing' AND j.deadline > {NOW}"


class PostgresStore(Store):
    """The store on PostgreSQL 13+, in its own schema."""

    engine = "postgresql"

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        super().__init__(url, options)
        self._pid = os.getpid()
        t = self.tables
        self.channel = f"alkstore_{options.schema}"
        #: The first key of the advisory locks that mark live waiters (see PostgresWaiter).
        self.lockspace = zlib.crc32(self.channel.encode()) & 0x7FFFFFFF
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
        self._sql = {k: v.format(**q, due="{due}") for k, v in _SQL.items()}
        claim = self._sql.pop("claim")
        self._sql["claim_one"] = claim.format(due=_DUE_ONE.format(**q))
        self._sql["claim_any"] = claim.format(due=_DUE_ANY.format(**q))
        try:
            # One direct connection first so an unreachable database is a clear error now.
            with psycopg.connect(url.conninfo, autocommit=True, connect_timeout=10) as conn:
                if options.setup:
                    self._setup(conn)
                else:
                    where = f"schema {options.schema!r} of {url.masked()}"
                    require_current(self._stored_version(conn), where)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {url.masked()}: {str(exc).strip()}"
            ) from exc
        self._pool = self._new_pool("durable", {})
        # Claims, acks, heartbeats and sweeps commit without waiting for the WAL flush:
        # one lost in a database crash only makes its message deliverable again, which
        # at-least-once delivery already allows. Publishes stay durable unless
        # ``durable_publish`` is off. (Not behind a transaction-mode pooler, which
        # refuses session startup options: there every commit waits.)
        self._fast = self._new_pool("fast", self._no_sync_commit())
        self._fast_keys = set(_FAST_KEYS)
        self._publisher: PipelinedPublisher | None = None
        self._publisher_lock = threading.Lock()
        if not options.durable_publish:
            self._fast_keys.add("insert")

    def _no_sync_commit(self) -> dict[str, Any]:
        """Connection options for commits that need not wait for the WAL flush."""
        if self.options.transaction_pooler:
            return {}
        return {"options": "-c synchronous_commit=off"}

    def _session_kwargs(self) -> dict[str, Any]:
        """psycopg options every connection to the broker URL gets: behind a
        transaction-mode pooler, no server-side prepared statements."""
        return {"prepare_threshold": None} if self.options.transaction_pooler else {}

    def _new_pool(self, kind: str, kwargs: dict[str, Any]) -> ConnectionPool:
        return ConnectionPool(
            self.url.conninfo,
            min_size=0,  # connect on first use; idle ones are closed after pool_max_idle
            max_size=self.options.pool_max_size,
            max_idle=self.options.pool_max_idle,
            kwargs={"autocommit": True, **self._session_kwargs(), **kwargs},
            timeout=POOL_TIMEOUT,
            open=True,
            name=f"alkstore-{self.options.schema}-{kind}",
        )

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        ambient = AMBIENT.get()
        if ambient is not None:
            yield self._adopt(ambient)
            return
        with self._pool.connection() as conn:
            yield conn

    def _with_conn(self, work: Callable[[psycopg.Connection], T], key: str = "") -> T:
        """Run ``work`` on a pooled connection (or the caller's, when one is bound).

        A pooled connection found broken (the server restarted, the backend was
        terminated) is discarded and ``work`` retried once on a fresh one.
        """
        ambient = AMBIENT.get()
        if ambient is not None:
            return work(self._adopt(ambient))
        pool = self._fast if key in self._fast_keys else self._pool
        for attempt in (0, 1):
            with pool.connection() as conn:
                try:
                    return work(conn)
                except psycopg.OperationalError:
                    if attempt or not conn.broken:
                        raise
            pool.check()  # drop the other idle connections the restart broke too
        raise AssertionError("unreachable")

    def _params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        # Every statement may name the NOTIFY channel; psycopg ignores unused keys.
        args = {"channel": self.channel, **(params or {})}
        check_text_params(args)
        return args

    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[tuple]:
        sql, args = self._sql[key], self._params(params)
        return self._with_conn(lambda c: c.execute(sql, args).fetchall(), key)

    def _one(self, key: str, params: dict[str, Any] | None = None) -> tuple | None:
        sql, args = self._sql[key], self._params(params)
        return self._with_conn(lambda c: c.execute(sql, args).fetchone(), key)

    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        sql, args = self._sql[key], self._params(params)
        return self._with_conn(lambda c: c.execute(sql, args).rowcount, key)

    def close(self) -> None:
        if os.getpid() == self._pid:  # a forked child must not close its parent's sockets
            self.rates_tally.close()
            if self._publisher is not None:
                self._publisher.close()
            self._pool.close()
            self._fast.close()

    # --------------------------------------------------------------------- setup
    def _setup(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            # Serialise concurrent setups of this schema (CREATE … IF NOT EXISTS races).
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.channel,))
            # Up to date: run no DDL, whose table locks would contend with live traffic.
            if self._stored_version(conn) == SCHEMA_VERSION:
                return
            for stmt in self.ddl():
                conn.execute(stmt)

    def _stored_version(self, conn: psycopg.Connection) -> int | None:
        meta = conn.execute(
            "SELECT to_regclass(%s)", (self.tables.qualified(self.tables.meta),)
        ).fetchone()
        if not meta or meta[0] is None:
            return None
        row = conn.execute(self._sql["version"]).fetchone()
        return int(row[0]) if row else None

    def setup(self) -> None:
        with self._pool.connection() as conn:
            self._setup(conn)

    def schema_version(self) -> int | None:
        with self._conn() as conn:
            return self._stored_version(conn)

    # ------------------------------------------------------------------- enqueue
    def _insert_params(self, j: NewJob) -> dict[str, Any]:
        return {
            **self._job_params(j),
            "run_at": j.run_at,
            "delay": j.delay,
            "channel": self.channel,
            # A job published inside the caller's transaction is never handed off: the
            # waiter's row would stay locked for as long as that transaction runs.
            "handoff": AMBIENT.get() is None,
            "lockspace": self.lockspace,
        }

    def _insert(self, jobs: list[NewJob]) -> list[int]:
        return self._insert_rows([self._insert_params(j) for j in jobs])

    def _insert_rows(self, params: list[dict[str, Any]]) -> list[int]:
        if len(params) == 1:
            return [
                self._with_conn(
                    lambda c: c.execute(self._sql["insert"], params[0]).fetchone()[0], "insert"
                )
            ]

        def insert_all(conn: psycopg.Connection) -> list[int]:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(self._sql["insert"], params, returning=True)
                ids = []
                while True:
                    ids.append(cur.fetchone()[0])
                    if not cur.nextset():
                        return ids

        return self._with_conn(insert_all, "insert")

    def publish(self, jobs: Sequence[NewJob]) -> None:
        if self.options.confirm_publish or AMBIENT.get() is not None:
            self.enqueue_many(jobs)
            return
        rows = [self._insert_params(job.checked()) for job in jobs]
        for row in rows:
            check_text_params(row)  # refused here, not after the call has returned
        if rows:
            self._pipelined().send(rows)
            self.rates_tally.published([r["queue"] for r in rows])

    def flush_publishes(self) -> None:
        if self._publisher is not None:
            self._publisher.flush()

    def _pipelined(self) -> PipelinedPublisher:
        with self._publisher_lock:
            return self._publisher or self._new_publisher()

    def _new_publisher(self) -> PipelinedPublisher:
        extra = {} if self.options.durable_publish else self._no_sync_commit()
        extra.update(self._session_kwargs())
        self._publisher = PipelinedPublisher(
            lambda: psycopg.connect(
                self.url.conninfo, autocommit=True, connect_timeout=10, **extra
            ),
            self._sql["insert"],
            self._insert_rows,
            prepared=not self.options.transaction_pooler,
        )
        return self._publisher

    # --------------------------------------------------------------------- claim
    def claim(self, queues: Sequence[str], limit: int = 1) -> list[Delivery]:
        queues = list(dict.fromkeys(queues))
        out: list[Delivery] = []
        while len(out) < limit and queues:
            params = {"queues": queues, "queue": queues[0], "limit": int(limit) - len(out)}
            claimed, spent = _deliveries(self._all(_claim_key(queues), params))
            out += claimed
            if not spent:  # no spent job took a place: nothing more is due
                break
        return out

    def async_claims(self) -> AsyncClaims:
        conn = psycopg.connect(
            self.url.conninfo,
            autocommit=True,
            connect_timeout=10,
            **self._no_sync_commit(),  # as the fast pool (see __init__)
            **self._session_kwargs(),
        )
        return AsyncClaims(self, conn)

    def has_due(self, queues: Sequence[str]) -> bool:
        row = self._one("has_due", {"queues": list(queues)})
        return bool(row and row[0])

    def ping(self) -> None:
        with self._pool.connection(timeout=PING_TIMEOUT) as conn:
            conn.execute("SELECT 1")

    def next_due(self, queues: Sequence[str]) -> float | None:
        row = self._one("next_due", {"queues": list(queues)})
        return row[0] if row else None

    @staticmethod
    def _arrays(held: list[Delivery]) -> dict[str, Any]:
        return {"ids": [d.id for d in held], "tokens": [d.token for d in held]}

    def _ids(self, key: str, params: dict[str, Any]) -> set[int]:
        return {r[0] for r in self._all(key, params)}

    def _delete_held(self, held: list[Delivery]) -> set[int]:
        return self._ids("ack", self._arrays(held)) if held else set()

    def _extend_held(self, held: list[Delivery], extend: float | None) -> set[int]:
        if not held:
            return set()
        return self._ids("heartbeat", {**self._arrays(held), "extend": extend})

    def _pend_held(self, held: list[tuple[Delivery, float, int]]) -> set[int]:
        if not held:
            return set()
        params = self._arrays([d for d, _, _ in held])
        params["delays"] = [float(w) for _, w, _ in held]
        params["refunds"] = [int(r) for _, _, r in held]
        params["channel"] = self.channel
        return self._ids("pend", params)

    def _kill_held(self, held: list[Delivery], error: str) -> set[int]:
        if not held:
            return set()
        return self._ids("kill", {**self._arrays(held), "error": error})

    # --------------------------------------------------------------- maintenance
    def _sweep_params(self) -> dict[str, Any]:
        return {
            "retention": self.options.dead_letter_retention,
            "grace": self.options.queue_expiry_grace,
            "lockspace": self.lockspace,
        }

    def sweep(self) -> SweepResult:
        row = self._one("sweep", self._sweep_params())
        assert row is not None
        return _sweep_result(row)

    # -------------------------------------------------------------- reads, admin
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        rows = self._all("counts", {"queues": list(queues) if queues is not None else None})
        return [QueueCounts(*r) for r in rows]

    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        rows = self._all("dead_list", {"queue": queue, "limit": int(limit)})
        return [Job(*r) for r in rows]

    def dead_requeue(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        params = {"ids": None if ids is None else list(ids), "queue": queue}
        params["channel"] = self.channel
        return self._run("dead_requeue", params)

    def dead_purge(self, ids: Sequence[int] | None = None, queue: str | None = None) -> int:
        return self._run("dead_purge", {"ids": None if ids is None else list(ids), "queue": queue})

    def dead_move(self, ids: Sequence[int], queue: str) -> int:
        validate_name(queue, "queue name")
        return len(self._all("dead_move", {"ids": [int(i) for i in ids], "to": queue}))

    def _write_rates(self, rows: list[RatePoint]) -> None:
        self._run(
            "rates_add",
            {
                "queues": [r.queue for r in rows],
                "minutes": [r.minute for r in rows],
                "pub": [r.published for r in rows],
                "ack": [r.acked for r in rows],
                "total": TOTAL_MINUTE,
            },
        )

    # ------------------------------------------------------------------- routing
    def exchange_declare(self, name: str, type_: str) -> None:
        validate_name(name, "exchange name")
        if type_ not in EXCHANGE_TYPES:
            raise ConfigurationError(f"exchange type {type_!r} is not one of {EXCHANGE_TYPES}")
        self._run("exchange_declare", {"name": name, "type": type_})

    def exchange_delete(self, name: str) -> None:
        self._run("exchange_delete", {"name": name})

    def bind(self, exchange: str, routing_key: str, queue: str) -> None:
        validate_name(exchange, "exchange name")
        validate_name(queue, "queue name")
        if routing_key:
            validate_name(routing_key, "routing key")
        self._run("bind", {"exchange": exchange, "rk": routing_key or "", "queue": queue})

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        self._run("unbind", {"exchange": exchange, "rk": routing_key or "", "queue": queue})

    def queue_delete(self, name: str) -> int:
        row = self._one("queue_delete", {"name": name})
        return int(row[0]) if row else 0

    def touch_queues(self, names: Sequence[str]) -> None:
        if names:
            self._run("touch_queues", {"names": list(names)})

    # ----------------------------------------------------------------- schedules
    @contextmanager
    def schedule_tick(self) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.transaction():
            token = AMBIENT.set(conn)
            try:
                yield ScheduleTick(self._sql, conn)
            finally:
                AMBIENT.reset(token)

    # -------------------------------------------------------------------- wakeup
    def waiter(self) -> PostgresWaiter:
        return PostgresWaiter(self)

    # ------------------------------------------------------ transactional publish
    def _adopt(self, connection: Any) -> psycopg.Connection:
        conn = _driver_connection(connection)
        if not isinstance(conn, psycopg.Connection):
            raise ConfigurationError(
                f"transaction(): {type(connection).__name__} is not a PostgreSQL connection, "
                f"but the broker is {self.url.masked()}"
            )
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if idle or getattr(conn, "_alkstore_checked", None) is not self._identity():
            # On an idle (non-autocommit) connection this statement also opens the caller's
            # transaction, so a multi-row insert's savepoint nests inside it.
            theirs = _identify(conn, self.tables.qualified(self.tables.jobs))
            if theirs[1] is None or (
                theirs != self._identity() and theirs != self._identity(refresh=True)
            ):
                where = f"{conn.info.host}:{conn.info.port}"
                raise ConfigurationError(
                    f"transaction(): the connection is to database {theirs[0]!r} at {where}"
                    f"{' (alkstore schema missing there)' if theirs[1] is None else ''}, but "
                    f"the broker is {self.url.masked()} (schema {self.options.schema!r}); "
                    "publish through a connection to the broker's database"
                )
            conn._alkstore_checked = self._identity()  # type: ignore[attr-defined]
        if idle and conn.autocommit:
            raise ConfigurationError(
                "transaction(): the connection is in autocommit mode with no transaction open, "
                "so a publish would commit at once; open a transaction first (psycopg: "
                "`with conn.transaction():`, SQLAlchemy: `begin()`, Django: "
                "`transaction.atomic()`)"
            )
        return conn

    def _identity(self, refresh: bool = False) -> tuple:
        """The broker's (database, jobs table oid, server start): one per database copy."""
        ident = getattr(self, "_ident", None)
        if ident is None or refresh:
            with self._pool.connection() as conn:
                ident = self._ident = _identify(conn, self.tables.qualified(self.tables.jobs))
        return ident


def _sweep_result(row: tuple) -> SweepResult:
    return SweepResult(row[0], row[1], tuple(row[2] or ()), row[3])


def _claim_key(queues: Sequence[str]) -> str:
    return "claim_one" if len(queues) == 1 else "claim_any"


def _deliveries(rows: list[tuple]) -> tuple[list[Delivery], bool]:
    """A claim's rows as deliveries (in claim order), and whether spent jobs (moved to
    the dead letters) took places in the batch, so more may be due."""
    claimed = [r for r in rows if r[0] is not None]
    claimed.sort(key=lambda r: (-r[4], r[9], r[0]))  # priority DESC, run_at, id
    return [Delivery(*r[:9], *r[10:13]) for r in claimed], len(claimed) < len(rows)


class AsyncClaims(AsyncSession):
    """The store's claim and ack for an event loop: sent at once, answered by callback
    from :meth:`on_readable` (see :mod:`.async_session` for the guarantees)."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection) -> None:
        # Also the worker's slow timers (the safety-net poll, the sweep): on this
        # connection, an idle worker needs no pooled one.
        keys = ("claim_one", "claim_any", "ack", "register", "has_due", "touch_queues", "sweep")
        prepared = not store.options.transaction_pooler
        super().__init__(conn, {k: store._sql[k] for k in keys}, prepared=prepared)
        self._store = store

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        callback: Callable[[list[Delivery] | BaseException, bool], None],
    ) -> None:
        """Claim up to ``limit`` due jobs as :meth:`Store.claim` does, in one statement;
        ``callback(deliveries, more)`` gets them (``more``: spent jobs took places)."""
        queues = list(dict.fromkeys(queues))
        params = self._store._params({"queues": queues, "queue": queues[0], "limit": int(limit)})

        def answered(rows: list[tuple] | BaseException) -> None:
            if isinstance(rows, BaseException):
                callback(rows, False)
            else:
                callback(*_deliveries(rows))

        self.send(_claim_key(queues), params, answered)

    def ack(
        self, deliveries: Sequence[Delivery], callback: Callable[[set[int] | BaseException], None]
    ) -> None:
        """Delete finished jobs as :meth:`Store.ack` does; ``callback`` gets the ids whose
        ack landed."""

        def answered(rows: list[tuple] | BaseException) -> None:
            if isinstance(rows, BaseException):
                callback(rows)
                return
            landed = {r[0] for r in rows}
            self._store.rates_tally.acked(deliveries, landed)
            callback(landed)

        self.send("ack", PostgresStore._arrays(list(deliveries)), answered)

    def has_due(
        self, queues: Sequence[str], callback: Callable[[bool | BaseException], None]
    ) -> None:
        """:meth:`Store.has_due`, answered by ``callback``."""

        def answered(rows: list[tuple] | BaseException) -> None:
            callback(rows if isinstance(rows, BaseException) else bool(rows and rows[0][0]))

        self.send("has_due", self._store._params({"queues": list(queues)}), answered)

    def sweep(
        self, queues: Sequence[str], callback: Callable[[SweepResult | BaseException], None]
    ) -> None:
        """Refresh ``queues`` (``touch_queues``), then :meth:`Store.sweep`, answered by
        ``callback``."""
        self.send("touch_queues", self._store._params({"names": list(queues)}), lambda _: None)

        def answered(rows: list[tuple] | BaseException) -> None:
            callback(rows if isinstance(rows, BaseException) else _sweep_result(rows[0]))

        self.send("sweep", self._store._params(self._store._sweep_params()), answered)

    def register(
        self,
        pid: int,
        chan: int,
        queues: Sequence[str],
        slots: int,
        callback: Callable[[list[tuple] | BaseException], None],
    ) -> None:
        """Offer ``slots`` of channel ``chan`` of the waiter ``pid`` to publishers of
        ``queues``: each new due job may then be handed to it directly (see the "insert"
        statement). No queues withdraws the offer."""
        params = {"pid": pid, "chan": chan, "queues": list(queues), "slots": int(slots)}
        self.send("register", params, callback)


def _identify(conn: psycopg.Connection, jobs: str) -> tuple:
    row = conn.execute(
        "SELECT current_database(), to_regclass(%s)::oid::bigint, "
        "extract(epoch FROM pg_postmaster_start_time())::float8",
        (jobs,),
    ).fetchone()
    return tuple(row) if row else ("?", None, None)


def _driver_connection(connection: Any) -> Any:
    """The psycopg/sqlite3 connection under a SQLAlchemy Connection or Session, or under an
    object with an ``alkstore_connection()`` method (resolved at each use)."""
    resolve = getattr(connection, "alkstore_connection", None)
    if callable(resolve):
        connection = resolve()
    get_conn = getattr(connection, "connection", None)  # SQLAlchemy Session → Connection
    if hasattr(connection, "get_bind") and callable(get_conn):
        connection = get_conn()
    dbapi = getattr(connection, "connection", None)  # SQLAlchemy Connection → pool proxy
    if dbapi is not None and hasattr(dbapi, "driver_connection"):
        if not connection.in_transaction():
            # Begin as SQLAlchemy would on a first execute: otherwise its commit() is a
            # no-op and the publish is rolled back when the connection goes back to the pool.
            connection.begin()
        return dbapi.driver_connection
    return connection


_waiters: weakref.WeakSet[PostgresWaiter] = weakref.WeakSet()


def close_all_waiters() -> None:
    """Close every LISTEN connection of this process (see ``close_all_stores``)."""
    for waiter in list(_waiters):
        with contextlib.suppress(Exception):
            waiter.close()


class PostgresWaiter(Waiter):
    """A dedicated autocommit connection LISTENing on the store's channel.

    It also takes hand-offs: while it lives its backend holds the advisory lock
    ``(lockspace, pid)``, which tells publishers its offers (rows in ``offers`` under its
    ``pid``) are live, and it LISTENs on its own channel, where a publisher sends a job it
    handed to one of its channels.
    """

    def __init__(self, store: PostgresStore) -> None:
        direct = store.options.listen_url
        conninfo = parse_store_url(direct).conninfo if direct else store.url.conninfo
        self._conn = psycopg.connect(conninfo, autocommit=True)
        _waiters.add(self)
        self._store = store
        self._conn.execute(f'LISTEN "{store.channel}"')  # from a validated identifier
        self.pid: int = self._conn.info.backend_pid
        self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (store.lockspace, self.pid))
        self._conn.execute(f'LISTEN "{HANDOFF_CHANNEL}{self.pid}"')
        # Offers left by an earlier backend with the same pid are not ours.
        self._conn.execute(store._sql["withdraw_offers"], {"pid": self.pid})
        self._owner = os.getpid()

    def fileno(self) -> int | None:
        return self._conn.fileno()

    def _collect(self, timeout: float) -> Wakeup:
        wake = Wakeup()
        now = time.time()
        for note in self._conn.notifies(timeout=timeout, stop_after=None if timeout == 0 else 1):
            try:
                payload = json.loads(note.payload)
                if payload == "routing":
                    wake.routing = True
                    continue
                if payload[0] == "h":
                    wake.handoffs.append(_handoff(payload))
                    continue
                run_at, queue = payload
            except (ValueError, TypeError, IndexError, binascii.Error):
                wake.any = True
                continue
            if run_at is None or run_at <= now + 0.001:
                wake.queues.add(queue)
            elif wake.next_at is None or run_at < wake.next_at:
                wake.next_at = run_at
        if timeout and wake:  # pick up the rest of a burst without blocking
            wake.merge(self._collect(0))
        return wake

    def poll(self) -> Wakeup:
        return self._collect(0)

    def wait(self, timeout: float) -> Wakeup:
        ready, _, _ = select.select([self._conn.fileno()], [], [], max(timeout, 0))
        return self._collect(0) if ready else Wakeup()

    def retire(self) -> list[tuple[int, Delivery]]:
        """Withdraw every offer of this waiter; return the jobs handed to it that arrived
        meanwhile (the caller hands them back)."""
        self._conn.execute(self._store._sql["withdraw_offers"], {"pid": self.pid})
        # A publisher that took an offer committed before the DELETE could: its
        # notification was sent before the DELETE's answer, so it is read here.
        return self._collect(0).handoffs

    def close(self) -> None:
        if os.getpid() == self._owner:
            self._conn.close()


def _handoff(payload: list) -> tuple[int, Delivery]:
    """``(channel number, delivery)`` from a hand-off notification (see "insert")."""
    _, chan, id_, token, queue, priority, max_attempts, backoff_base, deadline, msg_id, body = (
        payload[:11]
    )
    delivery = Delivery(
        id_,
        token,
        queue,
        base64.b64decode(body),
        priority,
        1,
        max_attempts,
        backoff_base,
        deadline,
        msg_id,
        payload[11] if len(payload) > 11 else None,
    )
    return chan, delivery


# A queue that is not paused (see Store.pause_queue): claims and the due checks skip a
# paused one. The paused names are read once per statement (an InitPlan over the small
# paused_queues table), which also plans faster than a NOT EXISTS anti-join
# (benchmarks/web_cost.py times the claim with and without it).
_ACTIVE = "{queue} <> ALL(ARRAY(SELECT queue FROM {{paused_queues}}))"

# The claim's candidates. "queue = %s" lets the planner walk the claim index in order and
# stop at LIMIT; "queue = ANY(%s)" would gather and sort every due row, so several queues
# take the best rows of each queue (each an ordered index walk) and then the best overall.
_DUE_ONE = f"""
  SELECT j.id, j.run_at AS was_due, (j.attempts >= j.max_attempts) AS spent
  FROM {{jobs}} j
  WHERE j.queue = %(queue)s AND j.run_at <= {NOW}
    AND (j.expires_at IS NULL OR j.expires_at > {NOW})
    AND {_ACTIVE.format(queue="%(queue)s")}
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
"""
_DUE_ANY = f"""
  SELECT c.id, c.run_at AS was_due, c.spent
  FROM unnest(%(queues)s::text[]) AS qn(name)
  CROSS JOIN LATERAL (
    SELECT j.id, j.priority, j.run_at, (j.attempts >= j.max_attempts) AS spent
    FROM {{jobs}} j
    WHERE j.queue = qn.name AND j.run_at <= {NOW}
      AND (j.expires_at IS NULL OR j.expires_at > {NOW})
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
  ) c
  WHERE {_ACTIVE.format(queue="qn.name")}
  ORDER BY c.priority DESC, c.run_at, c.id
  LIMIT %(limit)s
"""

#: The hand-off notification carries the job: its queue, message id and base64 body, as
#: JSON text (escapes and base64 line breaks counted), take at most this many bytes, so
#: with the numeric fields (under 250 bytes) it stays below NOTIFY's 8000-byte limit.
HANDOFF_MAX_BYTES = 7600
#: A waiter's own notification channel is this prefix and its backend pid.
HANDOFF_CHANNEL = "alkstore_w"
#: A fresh claim token (every claim, the worker's or a publisher's hand-off, gets one).
_TOKEN = "floor(random() * 9000000000000000000)::bigint"
#: True for an offer whose waiter is dead: a live one holds this lock (PostgresWaiter).
_WAITER_DEAD = "pg_try_advisory_xact_lock_shared(%(lockspace)s::int, {alias}.pid)"
#: A queue declared transient (x-expires or x-message-ttl: event and reply queues), whose
#: expired messages are dropped rather than dead-lettered.
_TRANSIENT = "(q.expires IS NOT NULL OR q.message_ttl IS NOT NULL)"
_NOTIFY = "pg_notify(%(channel)s, json_build_array({run_at}, {queue})::text)"
#: The dashboard's dead-letter filter (``admin.DeadFilter.params``); every part optional.
_DEAD_WHERE = """(%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(since)s::float8 IS NULL OR died_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR died_at < %(until)s::float8)
  AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
  AND (%(task1)s::bytea IS NULL OR position(%(task1)s::bytea IN body) > 0
       OR position(%(task2)s::bytea IN body) > 0)"""

_SQL: dict[str, str] = {
    "version": "SELECT value FROM {meta} WHERE key = 'schema_version'",
    # A new due job goes to an idle consumer that offered a slot (a live row in
    # "offers") already claimed, and the notification carries it, so the consumer starts
    # it without a claim round trip. Otherwise it is pending and announced on the channel.
    "insert": f"""
WITH q AS (SELECT * FROM {{queues}} WHERE name = %(queue)s),
v AS (
  SELECT COALESCE({NOW} + %(delay)s::float8, %(run_at)s::float8, {NOW}) AS run_at,
         COALESCE(%(expires_at)s::float8, {NOW} + (SELECT message_ttl FROM q)) AS expires_at,
         COALESCE(%(ma)s::int, (SELECT max_attempts FROM q), %(d_ma)s::int) AS max_attempts,
         COALESCE(%(vt)s::float8, (SELECT visibility_timeout FROM q), %(d_vt)s::float8) AS vt,
         COALESCE(%(bb)s::float8, (SELECT backoff_base FROM q), %(d_bb)s::float8) AS bb,
         {NOW} AS now
),
w AS (
  UPDATE {{offers}} w SET slots = w.slots - 1
  FROM (
    SELECT x.pid, x.chan FROM {{offers}} x, v
    WHERE %(handoff)s::boolean AND %(queue)s = ANY(x.queues) AND x.slots > 0
      AND v.run_at <= v.now AND (v.expires_at IS NULL OR v.expires_at > v.now)
      AND octet_length(json_build_array(%(queue)s::text, %(msg_id)s::text,
            encode(%(body)s::bytea, 'base64'))::text) <= {HANDOFF_MAX_BYTES}
      AND NOT {_WAITER_DEAD.format(alias="x")}  -- a dead one's row is skipped (and swept)
      -- nor is a job of a paused queue handed off (correlated to the offer row, so it
      -- is probed only when a worker is idle)
      AND NOT EXISTS (SELECT 1 FROM {{paused_queues}} pq
                      WHERE pq.queue = %(queue)s AND x.slots > 0)
    ORDER BY x.slots DESC  -- the idlest: a burst spreads over the idle workers
    LIMIT 1
    FOR UPDATE OF x SKIP LOCKED
  ) pick
  WHERE w.pid = pick.pid AND w.chan = pick.chan
  RETURNING w.pid, w.chan
),
ins AS (
  INSERT INTO {{jobs}} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                       visibility_timeout, backoff_base, created_at,
                       state, attempts, token, deadline)
  SELECT %(queue)s, %(msg_id)s, %(body)s::bytea, %(priority)s,
         CASE WHEN w.pid IS NULL THEN v.run_at ELSE v.now + v.vt END,
         v.expires_at, v.max_attempts, v.vt, v.bb, v.now,
         CASE WHEN w.pid IS NULL THEN 'pending' ELSE 'processing' END,
         CASE WHEN w.pid IS NULL THEN 0 ELSE 1 END,
         CASE WHEN w.pid IS NULL THEN NULL ELSE {_TOKEN} END,
         CASE WHEN w.pid IS NULL THEN NULL ELSE v.now + v.vt END
  FROM v LEFT JOIN w ON true
  RETURNING id, queue, run_at, token, priority, max_attempts, backoff_base, deadline, msg_id,
            body, visibility_timeout
)
SELECT ins.id, CASE
  WHEN w.pid IS NULL THEN {_NOTIFY.format(run_at="ins.run_at", queue="ins.queue")}
  ELSE pg_notify('{HANDOFF_CHANNEL}' || w.pid, json_build_array(
    'h', w.chan, ins.id, ins.token, ins.queue, ins.priority, ins.max_attempts,
    ins.backoff_base, ins.deadline, ins.msg_id, encode(ins.body, 'base64'),
    ins.visibility_timeout)::text)
  END
FROM ins LEFT JOIN w ON true""",
    # The offer of an idle channel (see "insert"): one row, its slots shared by all its
    # queues; no queues withdraws it.
    "register": """
WITH gone AS (
  DELETE FROM {offers}
  WHERE pid = %(pid)s AND chan = %(chan)s AND cardinality(%(queues)s::text[]) = 0
)
INSERT INTO {offers} (pid, chan, queues, slots)
SELECT %(pid)s, %(chan)s, %(queues)s::text[], %(slots)s
WHERE cardinality(%(queues)s::text[]) > 0
ON CONFLICT (pid, chan) DO UPDATE SET queues = EXCLUDED.queues, slots = EXCLUDED.slots""",
    "withdraw_offers": "DELETE FROM {offers} WHERE pid = %(pid)s",
    "claim": f"""
WITH due AS ({{due}}),
gone AS (
  DELETE FROM {{jobs}} j USING due WHERE j.id = due.id AND due.spent
  RETURNING j.*
),
buried AS (
  INSERT INTO {{dead}} ({_DEAD_COLS}, died_at, last_error)
  SELECT {_DEAD_COLS}, {NOW}, 'attempts exhausted' FROM gone RETURNING id
),
claimed AS (
  UPDATE {{jobs}} j
  SET state = 'processing', attempts = j.attempts + 1,
      token = {_TOKEN},
      deadline = {NOW} + j.visibility_timeout, run_at = {NOW} + j.visibility_timeout
  FROM due
  WHERE j.id = due.id AND NOT due.spent
  RETURNING j.id, j.token, j.queue, j.body, j.priority, j.attempts, j.max_attempts,
            j.backoff_base, j.deadline, due.was_due, j.msg_id, j.visibility_timeout,
            j.revoked_at IS NOT NULL
)
SELECT * FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, count(*)::int, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM buried HAVING count(*) > 0""",
    "has_due": f"""
SELECT EXISTS (
  SELECT 1 FROM unnest(%(queues)s::text[]) AS qn(name)
  WHERE EXISTS (SELECT 1 FROM {{jobs}} j WHERE j.queue = qn.name AND j.run_at <= {NOW})
    AND {_ACTIVE.format(queue="qn.name")}
)""",
    "size": "SELECT count(*) FROM {jobs} WHERE queue = %(queue)s AND state = 'pending'",
    # min(run_at) of the pending jobs, by a loose index scan of the claim index: one
    # seek per priority present in each queue, not a scan of every pending row.
    "next_due": f"""
SELECT min(first.run_at) FROM unnest(%(queues)s::text[]) AS qn(name)
CROSS JOIN LATERAL (
  WITH RECURSIVE prio(p) AS (
    (SELECT priority FROM {{jobs}} WHERE queue = qn.name ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {{jobs}} j WHERE j.queue = qn.name AND j.priority < prio.p
            ORDER BY j.priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
  )
  SELECT (SELECT j.run_at FROM {{jobs}} j
          WHERE j.queue = qn.name AND j.priority = prio.p AND j.state = 'pending'
            AND (j.expires_at IS NULL OR j.expires_at > {NOW})
          ORDER BY j.run_at LIMIT 1) AS run_at
  FROM prio WHERE prio.p IS NOT NULL
) first
WHERE {_ACTIVE.format(queue="qn.name")}""",
    "ack": f"""
DELETE FROM {{jobs}} j USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
WHERE {_HELD} RETURNING j.id""",
    "heartbeat": f"""
UPDATE {{jobs}} j
SET deadline = {NOW} + COALESCE(%(extend)s::float8, j.visibility_timeout),
    run_at = {NOW} + COALESCE(%(extend)s::float8, j.visibility_timeout)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
WHERE {_HELD} RETURNING j.id""",
    "pend": f"""
WITH moved AS (
  UPDATE {{jobs}} j
  SET state = 'pending', token = NULL, deadline = NULL, run_at = {NOW} + h.delay,
      attempts = j.attempts - h.refund
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(delays)s::float8[], %(refunds)s::int[])
       AS h(id, token, delay, refund)
  WHERE {_HELD} RETURNING j.id, j.queue, j.run_at
)
SELECT id, {_NOTIFY.format(run_at="run_at", queue="queue")} FROM moved""",
    "kill": f"""
WITH gone AS (
  DELETE FROM {{jobs}} j USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
  WHERE {_HELD} RETURNING j.*
)
INSERT INTO {{dead}} ({_DEAD_COLS}, died_at, last_error)
SELECT {_DEAD_COLS}, {NOW}, %(error)s FROM gone RETURNING id""",
    "sweep": f"""
WITH expired AS (
  -- Expiry is about starting: a running job (a live claim) is left to finish.
  DELETE FROM {{jobs}} j WHERE j.expires_at IS NOT NULL AND j.expires_at <= {NOW}
    AND (j.state = 'pending' OR j.deadline <= {NOW})
  RETURNING j.*
),
buried AS (
  INSERT INTO {{dead}} ({_DEAD_COLS}, died_at, last_error)
  SELECT {_DEAD_COLS}, {NOW}, 'expired' FROM expired e
  WHERE NOT EXISTS (SELECT 1 FROM {{queues}} q WHERE q.name = e.queue AND {_TRANSIENT})
  RETURNING 1
),
purged AS (
  DELETE FROM {{dead}} d
  WHERE d.died_at < {NOW} - COALESCE(
    (SELECT dead_letter_retention FROM {{queues}} q WHERE q.name = d.queue),
    %(retention)s::float8)
  RETURNING 1
),
dropped AS (
  DELETE FROM {{queues}} q
  WHERE q.expires IS NOT NULL AND q.last_used + GREATEST(q.expires, %(grace)s) < {NOW}
  RETURNING q.name
),
unbound AS (DELETE FROM {{bindings}} b USING dropped WHERE b.queue = dropped.name RETURNING 1),
emptied AS (DELETE FROM {{jobs}} j USING dropped WHERE j.queue = dropped.name),
stale AS (DELETE FROM {{offers}} w WHERE {_WAITER_DEAD.format(alias="w")}),
bumped AS (
  UPDATE {{meta}} SET value = (value::bigint + 1)::text
  WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM unbound)
  RETURNING pg_notify(%(channel)s, '"routing"')
)
SELECT (SELECT count(*) FROM buried), (SELECT count(*) FROM purged),
       (SELECT array_agg(name) FROM dropped),
       (SELECT count(*) FROM expired) - (SELECT count(*) FROM buried)""",
    "get_job_by_id": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}} WHERE id = %(id)s
UNION ALL SELECT {_DEAD_READ} FROM {{dead}} WHERE id = %(id)s""",
    "get_job_by_msg": f"""
(SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}} WHERE msg_id = %(id)s ORDER BY id DESC LIMIT 1)
UNION ALL
(SELECT {_DEAD_READ} FROM {{dead}} WHERE msg_id = %(id)s ORDER BY died_at DESC LIMIT 1)
LIMIT 1""",
    "counts": f"""
WITH live AS (
  SELECT queue,
         count(*) FILTER (WHERE state = 'pending' AND run_at <= {NOW}) AS pending,
         count(*) FILTER (WHERE state = 'pending' AND run_at > {NOW}) AS delayed,
         count(*) FILTER (WHERE state = 'processing') AS processing,
         {NOW} - min(created_at) FILTER (WHERE state = 'pending' AND run_at <= {NOW}) AS age
  FROM {{jobs}} WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s)
  GROUP BY queue
),
dl AS (
  SELECT queue, count(*) AS dead FROM {{dead}}
  WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s) GROUP BY queue
),
names AS (
  SELECT queue FROM live UNION SELECT queue FROM dl
  UNION SELECT unnest(COALESCE(%(queues)s::text[], '{{{{}}}}'))
)
SELECT n.queue, COALESCE(live.pending, 0), COALESCE(live.delayed, 0),
       COALESCE(live.processing, 0), COALESCE(dl.dead, 0), live.age
FROM names n LEFT JOIN live USING (queue) LEFT JOIN dl USING (queue)
ORDER BY n.queue""",
    "purge": "DELETE FROM {jobs} WHERE queue = %(queue)s AND state = 'pending'",
    "dead_list": f"""
SELECT {_DEAD_READ} FROM {{dead}}
WHERE %(queue)s::text IS NULL OR queue = %(queue)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s""",
    "dead_requeue": f"""
WITH back AS (
  DELETE FROM {{dead}}
  WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
    AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  RETURNING *
),
ins AS (
  INSERT INTO {{jobs}} (id, queue, msg_id, body, priority, run_at, expires_at, attempts,
                       max_attempts, visibility_timeout, backoff_base, created_at)
  SELECT id, queue, msg_id, body, priority, {NOW}, NULL, 0, max_attempts,
         visibility_timeout, backoff_base, created_at FROM back
  RETURNING queue
)
SELECT {_NOTIFY.format(run_at="NULL::float8", queue="queue")} FROM ins""",
    # A revoke is an operator's rare act: a scan of the jobs by task id is fine here.
    "revoke": f"""
UPDATE {{jobs}} SET revoked_at = {NOW}
WHERE msg_id = ANY(%(ids)s::text[]) AND revoked_at IS NULL""",
    "revoked_among": """
SELECT id FROM {jobs} WHERE id = ANY(%(job_ids)s::bigint[]) AND revoked_at IS NOT NULL""",
    "scheduled": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}}
WHERE state = 'pending' AND run_at > {NOW} AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY run_at, id LIMIT %(limit)s""",
    "dead_explain": """
UPDATE {dead} SET last_error = %(error)s WHERE msg_id = %(msg_id)s AND last_error = %(was)s""",
    "dead_purge": """
DELETE FROM {dead}
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)""",
    "exchange_declare": """
WITH up AS (
  INSERT INTO {exchanges} (name, type) VALUES (%(name)s, %(type)s)
  ON CONFLICT (name) DO UPDATE SET type = EXCLUDED.type
  WHERE {exchanges}.type IS DISTINCT FROM EXCLUDED.type RETURNING 1
)
UPDATE {meta} SET value = (value::bigint + 1)::text
WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM up)
RETURNING pg_notify(%(channel)s, '"routing"')""",
    "exchange_type": "SELECT type FROM {exchanges} WHERE name = %(name)s",
    "exchange_delete": """
WITH gone AS (DELETE FROM {exchanges} WHERE name = %(name)s RETURNING 1),
unbound AS (DELETE FROM {bindings} WHERE exchange = %(name)s)
UPDATE {meta} SET value = (value::bigint + 1)::text
WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM gone)
RETURNING pg_notify(%(channel)s, '"routing"')""",
    "bind": """
WITH up AS (
  INSERT INTO {bindings} (exchange, routing_key, queue) VALUES (%(exchange)s, %(rk)s, %(queue)s)
  ON CONFLICT DO NOTHING RETURNING 1
)
UPDATE {meta} SET value = (value::bigint + 1)::text
WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM up)
RETURNING pg_notify(%(channel)s, '"routing"')""",
    "unbind": """
WITH gone AS (
  DELETE FROM {bindings} WHERE exchange = %(exchange)s AND routing_key = %(rk)s
  AND queue = %(queue)s RETURNING 1
)
UPDATE {meta} SET value = (value::bigint + 1)::text
WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM gone)
RETURNING pg_notify(%(channel)s, '"routing"')""",
    "bindings": "SELECT routing_key, queue FROM {bindings} WHERE exchange = %(exchange)s",
    "routing_version": "SELECT value FROM {meta} WHERE key = 'routing_version'",
    "queue_declare": f"""
INSERT INTO {{queues}} (name, message_ttl, expires, last_used)
VALUES (%(name)s, %(ttl)s, %(expires)s, {NOW})
ON CONFLICT (name) DO UPDATE SET message_ttl = EXCLUDED.message_ttl,
  expires = EXCLUDED.expires, last_used = EXCLUDED.last_used""",
    "queue_exists": "SELECT 1 FROM {queues} WHERE name = %(name)s",
    "queue_delete": """
WITH gone AS (DELETE FROM {queues} WHERE name = %(name)s),
unbound AS (DELETE FROM {bindings} WHERE queue = %(name)s RETURNING 1),
emptied AS (DELETE FROM {jobs} WHERE queue = %(name)s RETURNING 1),
bumped AS (
UPDATE {meta} SET value = (value::bigint + 1)::text
  WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM unbound)
  RETURNING pg_notify(%(channel)s, '"routing"')
)
SELECT count(*) FROM emptied""",
    "touch_queues": f"UPDATE {{queues}} SET last_used = {NOW} WHERE name = ANY(%(names)s)",
    "lease_acquire": f"""
INSERT INTO {{leases}} (name, owner, expires_at) VALUES (%(name)s, %(owner)s, {NOW} + %(ttl)s)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE {{leases}}.owner = EXCLUDED.owner OR {{leases}}.expires_at <= {NOW}
RETURNING owner""",
    "lease_release": "DELETE FROM {leases} WHERE name = %(name)s AND owner = %(owner)s",
    "lease_holder": f"SELECT owner FROM {{leases}} WHERE name = %(name)s AND expires_at > {NOW}",
    # Beat schedules. An upsert keeps the lifecycle columns (enabled, last run, run count,
    # last error, a pending run-now) and, with "keep", the stored next_at while the kind,
    # spec and time zone are unchanged (the grid survives restarts and other edits).
    "schedule_upsert": f"""
INSERT INTO {{schedules}} (name, spec, interval, task, args, kwargs, options, next_at, origin,
                          kind, tz, updated_at)
VALUES (%(name)s, %(spec)s, %(interval)s, %(task)s, %(args)s, %(kwargs)s, %(options)s,
        %(next_at)s, %(origin)s, %(kind)s, %(tz)s, {NOW})
ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, interval = EXCLUDED.interval,
  task = EXCLUDED.task, args = EXCLUDED.args, kwargs = EXCLUDED.kwargs,
  options = EXCLUDED.options, origin = EXCLUDED.origin, updated_at = EXCLUDED.updated_at,
  kind = EXCLUDED.kind, tz = EXCLUDED.tz,
  next_at = CASE WHEN %(keep)s AND ({{schedules}}.kind, {{schedules}}.spec, {{schedules}}.tz)
                                 = (EXCLUDED.kind, EXCLUDED.spec, EXCLUDED.tz)
                 THEN {{schedules}}.next_at ELSE EXCLUDED.next_at END""",
    "schedule_delete": "DELETE FROM {schedules} WHERE name = %(name)s",
    "schedule_list": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules} ORDER BY name""",
    "schedule_get": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules} WHERE name = %(name)s""",
    # The database's clock: what "due" is measured against (never a beat host's clock).
    "schedule_clock": f"SELECT {NOW}",
    "schedule_due": """
SELECT name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
       last_run_at, run_count, last_error, run_requested
FROM {schedules}
WHERE (enabled AND next_at <= %(now)s) OR run_requested IS NOT NULL
ORDER BY next_at, name
FOR UPDATE SKIP LOCKED""",
    # One boundary fired: the next one, guarded by the one fired (a second ticker's
    # advance of the same boundary matches no row).
    "schedule_advance": """
UPDATE {schedules} SET next_at = %(new)s, last_run_at = %(now)s, run_count = run_count + 1,
  last_error = NULL
WHERE name = %(name)s AND next_at = %(prev)s""",
    # Missed boundaries beyond the catch-up limit: skipped, not counted as runs.
    "schedule_skip": """
UPDATE {schedules} SET next_at = %(new)s WHERE name = %(name)s AND next_at = %(prev)s""",
    "schedule_ran_now": """
UPDATE {schedules} SET run_requested = NULL, last_run_at = %(now)s,
  run_count = run_count + 1, last_error = NULL
WHERE name = %(name)s AND run_requested = %(requested)s""",
    "schedule_failed": """
UPDATE {schedules} SET last_error = %(error)s WHERE name = %(name)s""",
    "schedule_run_now": f"""
UPDATE {{schedules}} SET run_requested = COALESCE(run_requested, {NOW}) WHERE name = %(name)s""",
    "schedule_disable": "UPDATE {schedules} SET enabled = false WHERE name = %(name)s",
    # Re-enabled: the next boundary on the same grid after now (computed by the caller).
    "schedule_enable": """
UPDATE {schedules} SET enabled = true, next_at = %(new)s
WHERE name = %(name)s AND next_at = %(prev)s""",
    # ---- pause/resume and the dashboard's reads (kombu_alkstore.web)
    "queue_pause": f"""
INSERT INTO {{paused_queues}} (queue, paused_at) VALUES (%(name)s, {NOW})
ON CONFLICT (queue) DO NOTHING RETURNING queue""",
    "queue_resume": f"""
WITH gone AS (DELETE FROM {{paused_queues}} WHERE queue = %(name)s RETURNING queue)
SELECT queue, {_NOTIFY.format(run_at="NULL::float8", queue="queue")} FROM gone""",
    "paused_list": "SELECT queue, paused_at FROM {paused_queues} ORDER BY queue",
    "peek": f"""
SELECT {_JOB_COLS}, NULL, NULL FROM {{jobs}}
WHERE queue = %(queue)s AND state = 'pending'
ORDER BY priority DESC, run_at, id LIMIT %(limit)s""",
    "dead_search": f"""
SELECT {_DEAD_READ} FROM {{dead}}
WHERE {_DEAD_WHERE}
  AND (%(b_at)s::float8 IS NULL OR (died_at, id) < (%(b_at)s::float8, %(b_id)s::bigint))
ORDER BY died_at DESC, id DESC LIMIT %(limit)s""",
    "dead_search_window": f"""
SELECT {_DEAD_READ} FROM (
  SELECT * FROM {{dead}}
  WHERE %(b_at)s::float8 IS NULL OR (died_at, id) < (%(b_at)s::float8, %(b_id)s::bigint)
  ORDER BY died_at DESC, id DESC LIMIT %(scan)s
) AS w
WHERE {_DEAD_WHERE}
ORDER BY died_at DESC, id DESC LIMIT %(limit)s""",
    # The last row of a window, if any row follows it (else the search is complete).
    "dead_window": """
SELECT died_at, id FROM {dead}
WHERE %(b_at)s::float8 IS NULL OR (died_at, id) < (%(b_at)s::float8, %(b_id)s::bigint)
ORDER BY died_at DESC, id DESC OFFSET %(scan)s - 1 LIMIT 2""",
    "dead_count": f"""
SELECT count(*) FROM (SELECT 1 FROM {{dead}} WHERE {_DEAD_WHERE} LIMIT %(cap)s) AS m""",
    "dead_ids": f"""
SELECT id FROM {{dead}} WHERE {_DEAD_WHERE} AND id > %(after)s ORDER BY id LIMIT %(limit)s""",
    "dead_move": f"""
WITH back AS (DELETE FROM {{dead}} WHERE id = ANY(%(ids)s::bigint[]) RETURNING *),
ins AS (
  INSERT INTO {{jobs}} (id, queue, msg_id, body, priority, run_at, expires_at, attempts,
                       max_attempts, visibility_timeout, backoff_base, created_at)
  SELECT id, %(to)s, msg_id, body, priority, {NOW}, NULL, 0, max_attempts,
         visibility_timeout, backoff_base, created_at FROM back
  RETURNING id
),
woke AS (SELECT {_NOTIFY.format(run_at="NULL::float8", queue="%(to)s::text")})
SELECT ins.id FROM ins, woke""",
    "claim_stats": """
WITH p AS (
  SELECT queue, count(*) AS n, min(created_at) AS oldest, min(deadline) AS deadline
  FROM {jobs} WHERE state = 'processing' GROUP BY queue
),
w AS (
  SELECT qn.queue, count(*) AS offers, sum(o.slots) AS slots
  FROM {offers} o CROSS JOIN LATERAL unnest(o.queues) AS qn(queue) GROUP BY qn.queue
)
SELECT COALESCE(p.queue, w.queue), COALESCE(p.n, 0), p.oldest, p.deadline,
       COALESCE(w.offers, 0), COALESCE(w.slots, 0)::int
FROM p FULL JOIN w ON p.queue = w.queue ORDER BY 1""",
    "rates_add": """
INSERT INTO {rates} AS r (queue, minute, published, acked)
SELECT q, m, sum(p), sum(a) FROM (
  SELECT * FROM unnest(%(queues)s::text[], %(minutes)s::float8[], %(pub)s::bigint[],
                       %(ack)s::bigint[]) AS x(q, m, p, a)
  UNION ALL
  SELECT q, %(total)s::float8, p, a FROM unnest(%(queues)s::text[], %(pub)s::bigint[],
                                               %(ack)s::bigint[]) AS y(q, p, a)
) c GROUP BY q, m
ON CONFLICT (queue, minute) DO UPDATE
SET published = r.published + EXCLUDED.published, acked = r.acked + EXCLUDED.acked""",
    "rates_since": """
SELECT queue, minute, published, acked FROM {rates}
WHERE minute >= %(since)s AND minute > 0 ORDER BY minute, queue""",
    "rates_totals": """
SELECT queue, minute, published, acked FROM {rates} WHERE minute = %(total)s ORDER BY queue""",
    "rates_trim": "DELETE FROM {rates} WHERE minute < %(before)s AND minute > 0",
}
