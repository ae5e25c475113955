"""The PostgreSQL store: psycopg 3 with connection pools, ``FOR UPDATE SKIP LOCKED``
claims and ``LISTEN/NOTIFY`` wake-ups; its statements are in ``queries.sql``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import ConfigurationError, StoreUnavailable
from ..acts import Actor, Run
from ..admin import RatePoint
from ..adopt import driver_connection
from ..ambient import AMBIENT
from ..interface import Store
from ..options import StoreOptions, StoreURL, validate_name
from ..schedules import ScheduleTick
from ..schema import SCHEMA_VERSION, migrations, require_current
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
from . import handoff
from .claims import PostgresClaimSession
from .conninfo import privileges_missing
from .engine import ENGINE
from .floors import ClaimFloors
from .inserts import Inserts
from .lookbehind import FloorWatch
from .publisher import PipelinedPublisher
from .statements import (
    FAST_KEYS,
    PostgresStatements,
    claim_key,
    claim_params,
    claimed_deliveries,
    handles,
    pend_params,
    rates_params,
)
from .waiter import PostgresWaiter

T = TypeVar("T")
#: Seconds a statement waits for a pooled connection (the database may be down).
POOL_TIMEOUT = 10.0
#: ... and a connection check, which should fail fast so kombu's retry backoff applies.
PING_TIMEOUT = 3.0


#: The store's sessions plan each prepared statement once, generically: left to choose,
#: PostgreSQL replans each execution on jobs' four generations (a claim 716 µs against
#: 533, an ack 487 against 288: docs/benchmarks.md, stop 50).
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"


class PostgresStore(Store):
    """The store on PostgreSQL 13+, in its own schema."""

    engine = ENGINE.name  # as the package describes itself (engine.py)
    capabilities = Capabilities(
        listener=True,
        handoff=True,
        session=True,
        pipelined_publish=True,
        declare_outside_transaction=True,
        generations=True,
    )
    connection_errors = (
        StoreUnavailable,
        psycopg.OperationalError,
        psycopg.InterfaceError,
        PoolTimeout,
    )
    database_errors = (StoreUnavailable, psycopg.Error, PoolTimeout)

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        super().__init__(url, options)
        self._pid = os.getpid()
        #: Its statements, their parameters and rows (shared with the claim session,
        #: the waiter and the result tables).
        # The schema's functions: migration 0013's for limited queues, 0016's writes by
        # id, 0017's rotation of jobs' generations.
        functions = {
            f: f'"{options.schema}".{f}'
            for f in (
                "limited_picks",
                "log_claim",
                "delete_rows",
                "claim_rows",
                "rotate_generation",
            )
        }
        self.statements = PostgresStatements({**self.names, **functions}, options.schema)
        #: The store's NOTIFY channel (bound to every statement as ``%(channel)s``).
        self.channel = self.statements.channel
        #: The first key of the advisory locks that mark live waiters (see PostgresWaiter).
        self.lockspace = self.statements.lockspace
        self._sql = self.statements.sql
        #: Where claims start in the claim index (floors.py); the waiter lowers them.
        self.floors = ClaimFloors.of(options)
        #: Looks behind the floors from its own thread once a claim session starts.
        self.floor_watch = FloorWatch(self, options.claim_floor_rescan / 2)
        try:
            # One direct connection first so an unreachable database is a clear error now.
            with psycopg.connect(
                url.conninfo, autocommit=True, connect_timeout=10, row_factory=dict_row
            ) as conn:
                if options.setup:
                    self._setup(conn)
                else:
                    where = f"schema {options.schema!r} of {url.masked()}"
                    require_current(self._stored_version(conn), where)
                self._measure_clock(conn)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {url.masked()}: {str(exc).strip()}"
            ) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise privileges_missing(exc, url, options) from exc
        self._pool = self._new_pool("durable", self._startup_options(GENERIC_PLANS))
        # Claims, acks, heartbeats and maintenance commit without waiting for the WAL
        # flush: one lost in a database crash only makes its message deliverable again,
        # which at-least-once delivery already allows. Publishes stay durable unless
        # ``durable_publish`` is off. (Not behind a transaction-mode pooler, which
        # refuses session startup options: there every commit waits.)
        self._fast = self._new_pool("fast", self._no_sync_commit())
        self._fast_keys = set(FAST_KEYS)
        self._publisher: PipelinedPublisher | None = None
        self._inserts = Inserts(self._sql)
        self._publisher_lock = threading.Lock()
        if not options.durable_publish:
            self._fast_keys.add("insert")

    def _no_sync_commit(self) -> dict[str, Any]:
        """Connection options for commits that need not wait for the WAL flush."""
        return self._startup_options("-c synchronous_commit=off", GENERIC_PLANS)

    def _startup_options(self, *settings: str) -> dict[str, Any]:
        """Startup options setting ``settings`` (none behind a transaction pooler)."""
        if self.options.transaction_pooler:
            return {}
        # Added to the URL's own (psycopg's keyword would replace the conninfo's).
        given = conninfo_to_dict(self.url.conninfo).get("options") or ""
        return {"options": " ".join([given, *settings]).strip()}

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
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                **self._session_kwargs(),
                **kwargs,
            },
            timeout=POOL_TIMEOUT,
            open=True,
            name=f"alkstore-{self.options.schema}-{kind}",
        )

    # ------------------------------------------------------------------ plumbing
    def _with_conn(self, work: Callable[[psycopg.Connection], T], key: str = "") -> T:
        """Run ``work`` on a pooled connection (or the caller's, when one is bound).

        A pooled connection found broken (the server restarted, the backend was
        terminated) is discarded and ``work`` retried once on a fresh one.
        """
        ambient = AMBIENT.get()
        if ambient is not None:
            return work(self._adopt(ambient))
        pool = self._fast if key in self._fast_keys else self._pool
        # Closing (the rate counts' last flush): wait no longer than a connection check
        # for a connection, or a store closed while the database is down hangs.
        wait = PING_TIMEOUT if self.closed else None
        for attempt in (0, 1):
            with pool.connection(timeout=wait) as conn:
                try:
                    return work(conn)
                except psycopg.OperationalError:
                    if attempt or not conn.broken:
                        raise
            pool.check()  # drop the other idle connections the restart broke too
        raise AssertionError("unreachable")

    def _params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        return self.statements.params(params)

    def _execute(self, key: str, params: dict[str, Any] | None) -> Callable:
        """``work`` for :meth:`_with_conn`: statement ``key`` on a cursor whose rows are
        mappings (a caller's bound connection keeps its own row factory)."""
        sql, args = self._sql[key], self._params(params)
        return lambda conn: conn.cursor(row_factory=dict_row).execute(sql, args)

    @contextmanager
    def _transaction(self) -> Iterator[Run]:
        """One transaction on a pooled connection (a savepoint in the caller's, when one
        is bound); yields a function running a named statement in it, all its rows."""
        ambient = AMBIENT.get()
        held = nullcontext(self._adopt(ambient)) if ambient is not None else self._pool.connection()
        with held as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:

            def run(key: str, params: dict[str, Any] | None = None) -> list[Row]:
                cur.execute(self._sql[key], self._params(params))
                return cur.fetchall() if cur.description is not None else []

            yield run

    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[Row]:
        run = self._execute(key, params)
        return self._with_conn(lambda c: run(c).fetchall(), key)

    def _one(self, key: str, params: dict[str, Any] | None = None) -> Row | None:
        run = self._execute(key, params)
        return self._with_conn(lambda c: run(c).fetchone(), key)

    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        run = self._execute(key, params)
        return self._with_conn(lambda c: run(c).rowcount, key)

    def close(self) -> None:
        self.closed = True
        self.floor_watch.stop()
        if os.getpid() == self._pid:  # a forked child must not close its parent's sockets
            self.rates_tally.close()
            if self._publisher is not None:
                self._publisher.close()
            self._pool.close()
            self._fast.close()

    # --------------------------------------------------------------------- setup
    def _setup(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            conn.execute(self._sql["setup_lock"], self._params(None))
            # Up to date: run no DDL, whose table locks would contend with live traffic.
            stored = self._stored_version(conn)
            if stored is None or stored < SCHEMA_VERSION:
                migrations(self.options.schema, self.engine).apply(conn.execute, stored)

    def _stored_version(self, conn: psycopg.Connection) -> int | None:
        cur = conn.cursor(row_factory=dict_row)
        meta = cur.execute(self._sql["meta_table"], {"meta": self.names["meta"]}).fetchone()
        if not meta or meta["oid"] is None:
            return None
        row = cur.execute(self._sql["version"]).fetchone()
        return int(row["value"]) if row else None

    def setup(self) -> None:
        with self._pool.connection() as conn:
            self._setup(conn)

    def schema_version(self) -> int | None:
        ambient = AMBIENT.get()
        if ambient is not None:
            return self._stored_version(self._adopt(ambient))
        with self._pool.connection() as conn:
            return self._stored_version(conn)

    # ------------------------------------------------------------------- enqueue
    def _insert_params(self, j: NewJob) -> dict[str, Any]:
        return self._params(
            {
                **self._job_params(j),
                "run_at": j.run_at,
                "delay": j.delay,
                "fits": handoff.fits(j.queue, j.msg_id, j.body),
                # A job published inside the caller's transaction is never handed off:
                # the waiter's row would stay locked for as long as that transaction runs.
                "handoff": AMBIENT.get() is None,
            }
        )

    def _insert(self, jobs: list[NewJob]) -> list[int | None]:
        return self._insert_rows([self._insert_params(j) for j in jobs])

    def _insert_rows(self, params: list[dict[str, Any]]) -> list[int | None]:
        """Insert jobs whose parameters :meth:`_insert_params` made (and checked), by
        :class:`.inserts.Inserts` (None: a unique key held)."""
        return self._with_conn(lambda conn: self._inserts.run(conn, params), "insert")

    def publish(self, jobs: Sequence[NewJob]) -> None:
        if self.options.confirm_publish or AMBIENT.get() is not None:
            self.enqueue_many(jobs)
            return
        if any(job.unique_key is not None for job in jobs):
            # A publish with a unique key is confirmed, so that a duplicate is known and
            # logged; the pipelined publishes sent before it are confirmed first, so it
            # does not overtake them.
            self.flush_publishes()
            self.enqueue_many(jobs)
            return
        # _insert_params checks the text parameters: refused here, not after the call
        # has returned.
        rows = [self._insert_params(job.checked()) for job in jobs]
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
        durable = self.options.durable_publish
        extra = self._startup_options(GENERIC_PLANS) if durable else self._no_sync_commit()
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
            bands, plan = self.floors.plan(queues)
            rows = self._all(claim_key(queues), claim_params(queues, int(limit) - len(out), bands))
            self.floors.learn(plan, rows)
            claimed, spent = claimed_deliveries(rows)
            out += claimed
            if not spent:  # no spent job took a place: nothing more is due
                break
        return out

    def claim_params(self, queues: Sequence[str], limit: int = 1) -> dict[str, Any]:
        """The parameters a claim of these (distinct) queues binds now, between two
        full claims (for EXPLAIN: benchmarks/claim_cost.py); changes nothing."""
        return claim_params(queues, limit, self.floors.plan(queues, peek=True)[0])

    def session(self) -> PostgresClaimSession:
        conn = psycopg.connect(
            self.url.conninfo,
            autocommit=True,
            connect_timeout=10,
            **self._no_sync_commit(),  # as the fast pool (see __init__)
            **self._session_kwargs(),
        )
        try:
            return PostgresClaimSession(self, conn)
        except BaseException:
            # A statement it could not prepare: the connection goes with the error, or
            # every reconnect of a consumer (Celery retries at once) would keep one more.
            conn.close()
            raise

    def has_due(self, queues: Sequence[str]) -> bool:
        return bool(self._value("has_due", self.probe_params(queues)))

    def ping(self) -> None:
        with self._pool.connection(timeout=PING_TIMEOUT) as conn:
            conn.execute(self._sql["ping"])

    def measure_clock(self) -> float:
        return self._with_conn(self._measure_clock)

    def _measure_clock(self, conn: psycopg.Connection) -> float:
        """The database's clock against this host's, read halfway through a round trip."""
        before = time.time()
        (row,) = conn.execute(self._sql["clock"]).fetchall()
        after = time.time()
        self.clock_offset = row["now"] - (before + after) / 2
        return self.clock_offset

    def next_due(self, queues: Sequence[str]) -> float | None:
        return self._value("next_due", self.probe_params(queues))

    def probe_params(self, queues: Sequence[str]) -> dict[str, Any]:
        """has_due's and next_due's parameters: the queues and the bands a claim of each
        would walk now."""
        queues = list(dict.fromkeys(queues))
        return {"queues": queues, **self.floors.probe(queues)}

    def _ids(self, key: str, params: dict[str, Any]) -> set[int]:
        return set(self._column(key, params))

    def _delete_held(self, held: list[Delivery]) -> set[int]:
        return self._ids("ack", handles(held)) if held else set()

    def _extend_held(self, held: list[Delivery], extend: float | None) -> set[int]:
        if not held:
            return set()
        return self._ids("heartbeat", {**handles(held), "extend": extend})

    def _pend_held(self, held: list[tuple[Delivery, float, int]]) -> set[int]:
        if not held:
            return set()
        return self._ids("pend", pend_params(held))

    def _kill_held(self, held: list[Delivery], error: str) -> set[int]:
        if not held:
            return set()
        return self._ids("kill", {**handles(held), "error": error})

    # --------------------------------------------------------------- maintenance
    def _maintenance_params(self, job: str | None = None) -> dict[str, Any]:
        """The parameters of maintenance job ``job`` (each one named statement), or of
        the round (``None``: every job in one statement)."""
        if job is not None and job not in MAINTENANCE_JOBS:
            raise ConfigurationError(f"unknown maintenance job {job!r}: {MAINTENANCE_JOBS}")
        return {
            "retention": self.options.dead_letter_retention,
            "grace": self.options.queue_expiry_grace,
            "batch": self.options.maintenance_batch,
        }

    @staticmethod
    def _maintained(job: str, rows: list[Row]) -> MaintenanceResult:
        """A maintenance statement's one row as its result."""
        row = dict(rows[0])
        row["queues"] = tuple(row.get("queues") or ())
        return MaintenanceResult(job=job, **row)

    @classmethod
    def _round(cls, rows: list[Row]) -> list[MaintenanceResult]:
        """The round statement's rows (one per job) as results, in MAINTENANCE_JOBS order."""
        by_job = {r["job"]: {k: v for k, v in r.items() if k != "job"} for r in rows}
        return [cls._maintained(job, [by_job[job]]) for job in MAINTENANCE_JOBS]

    def maintain(self, job: str) -> MaintenanceResult:
        params = self._maintenance_params(job)
        return self._maintained(job, self._all(job, params))

    def maintain_round(self) -> list[MaintenanceResult]:
        return self._round(self._all("maintenance_round", self._maintenance_params()))

    # -------------------------------------------------------------- reads, admin
    def counts(self, queues: Sequence[str] | None = None) -> list[QueueCounts]:
        rows = self._all("counts", {"queues": list(queues) if queues is not None else None})
        return [QueueCounts(**r) for r in rows]

    def dead_list(self, queue: str | None = None, limit: int = 100) -> list[Job]:
        rows = self._all("dead_list", {"queue": queue, "limit": int(limit)})
        return [Job(**r) for r in rows]

    def _dead_change(
        self,
        key: str,
        params: dict[str, Any],
        act: str,
        actor: Actor | None,
        target: str | None = None,
    ) -> int:
        """Statement ``key`` (one row per queue changed), with its act when ``actor``."""
        params = self._cap(params)
        done = self._acting(act, actor, lambda run: run(key, params), target)
        return sum(g.count or 0 for g in done)

    def _dead_pick(self, ids: Sequence[int] | None, queue: str | None) -> dict[str, Any]:
        return {"ids": None if ids is None else [int(i) for i in ids], "queue": queue}

    def dead_requeue(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        params = self._dead_pick(ids, queue)
        return self._dead_change("dead_requeue", params, "dead_requeue", actor)

    def dead_purge(
        self,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        actor: Actor | None = None,
    ) -> int:
        params = self._dead_pick(ids, queue)
        return self._dead_change("dead_purge", params, "dead_purge", actor)

    def dead_move(self, ids: Sequence[int], queue: str, actor: Actor | None = None) -> int:
        validate_name(queue, "queue name")
        params = {"ids": [int(i) for i in ids], "to": queue}
        return self._dead_change("dead_move", params, "dead_move", actor, target=queue)

    def _write_rates(self, rows: list[RatePoint]) -> None:
        self._run("rates_add", rates_params(rows))

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
        return int(self._value("queue_delete", {"name": name}) or 0)

    def touch_queues(self, names: Sequence[str]) -> set[str]:
        if not names:
            return set()
        return set(self._column("touch_queues", {"names": list(names)}))

    # ----------------------------------------------------------------- schedules
    @contextmanager
    def schedule_tick(self) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.transaction():
            token = AMBIENT.set(conn)
            try:
                yield ScheduleTick(self._sql, conn)
            finally:
                AMBIENT.reset(token)

    # ------------------------------------------------------------------- results
    def _new_results(self) -> Any:
        from .results import PostgresResults

        return PostgresResults(self)

    # -------------------------------------------------------------------- wakeup
    def waiter(self) -> PostgresWaiter:
        return PostgresWaiter(self)

    # ------------------------------------------------------ transactional publish
    def _adopt(self, connection: Any) -> psycopg.Connection:
        conn = driver_connection(connection)
        if not isinstance(conn, psycopg.Connection):
            raise ConfigurationError(
                f"transaction(): {type(connection).__name__} is not a PostgreSQL connection, "
                f"but the broker is {self.url.masked()}"
            )
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if idle or getattr(conn, "_alkstore_checked", None) is not self._identity():
            # On an idle (non-autocommit) connection this statement also opens the caller's
            # transaction, so a multi-row insert's savepoint nests inside it.
            theirs = self._identify(conn)
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
                ident = self._ident = self._identify(conn)
        return ident

    def _identify(self, conn: psycopg.Connection) -> tuple:
        cur = conn.cursor(row_factory=dict_row)
        row = cur.execute(self._sql["identify"], {"jobs": self.names["jobs"]}).fetchone()
        return (row["database"], row["jobs"], row["started"]) if row else ("?", None, None)
