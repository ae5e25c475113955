"""Helpers for Celery-facing tests: apps, in-thread workers, worker subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Connection, Queue
from kombu.asynchronous import Hub

import kombu_alkstore  # noqa: F401
from kombu_alkstore.compat.celery import release_event_loop
from kombu_alkstore.maintenance import LEASE
from kombu_alkstore.store import NewJob

if TYPE_CHECKING:
    from tests.conftest import Target

ROOT = Path(__file__).resolve().parent.parent


#: Apps made during the current test; conftest closes them (and their connections) after it.
APPS: list[Celery] = []


def make_app(target, name: str = "t", **conf) -> Celery:
    """A Celery app on ``target`` (a conftest Target) with the rpc:// result backend."""
    app = Celery(name, broker=target.broker_url, backend="rpc://", set_as_current=False)
    APPS.append(app)
    # A short safety-net poll keeps in-thread worker shutdown quick on PostgreSQL.
    options = dict(target.transport_options, polling_interval=1.0)
    options.update(conf.pop("transport_options", {}))
    app.conf.update(
        broker_transport_options=options,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        **conf,
    )
    return app


@contextmanager
def thread_worker(app: Celery, **kwargs) -> Iterator[object]:
    """A real Celery worker in a thread (threads pool by default)."""
    kwargs.setdefault("pool", "threads")
    kwargs.setdefault("concurrency", 4)
    kwargs.setdefault("perform_ping_check", False)
    kwargs.setdefault("loglevel", "WARNING")
    kwargs.setdefault("shutdown_timeout", 20)
    try:
        with start_worker(app, **kwargs) as worker:
            yield worker
    finally:
        release_event_loop()  # Celery < 5.7: the next worker would adopt this one's loop


def proc_env(target, record: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ALKSTORE_TEST_BROKER=target.broker_url,
        ALKSTORE_TEST_SCHEMA=target.schema,
        ALKSTORE_TEST_RECORD=str(record),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.update(extra)
    return env


@contextmanager
def worker_process(
    target,
    record: Path,
    *args: str,
    app: str = "tests.apps.proj",
    log: Path | None = None,
    **env: str,
) -> Iterator[subprocess.Popen]:
    """A ``celery worker`` subprocess; always killed (with its children) on exit."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, "worker", "--loglevel=INFO", *args],
        env=proc_env(target, record, **env),
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        kill_group(proc)
        if log:
            out.close()


@contextmanager
def worker_processes(
    target,
    record: Path,
    workers: list[tuple[str, tuple[str, ...]]],
    queue: str,
    app: str,
    logs: Path,
    **env: str,
) -> Iterator[list[subprocess.Popen]]:
    """``celery worker`` subprocesses consuming ``queue``, one per ``(name, args)`` of
    ``workers`` (named ``name@%h``, logging to ``logs/name.log``), in that order; every
    one killed (with its children) on exit."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                worker_process(
                    target,
                    record,
                    *args,
                    "-n",
                    f"{name}@%h",
                    "-Q",
                    queue,
                    app=app,
                    log=logs / f"{name}.log",
                    **env,
                )
            )
            for name, args in workers
        ]


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a subprocess and everything in its session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def read_record(record: Path) -> list[list[str]]:
    if not record.exists():
        return []
    return [line.split("\t") for line in record.read_text().splitlines() if line]


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1):
    """Poll ``predicate`` until truthy; return its value or raise AssertionError."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def options_env(**options) -> dict[str, str]:
    return {"ALKSTORE_TEST_OPTIONS": json.dumps(options)}


def run_solo_worker(env_extra: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run the test project's worker (solo pool) until it exits, its output captured and
    its task records discarded; ``subprocess.TimeoutExpired`` if it is still running."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), ALKSTORE_TEST_RECORD="/dev/null")
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.apps.proj", "worker", "-P", "solo"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cluster_app(cluster, **env_extra: str) -> tuple[Target, dict, Celery, dict[str, str]]:
    """On a private cluster (tests.private_pg): the Target (schema ``alk``), its transport
    options (1 s safety-net poll), an app, and the worker-process environment carrying
    those options plus ``env_extra``."""
    from tests.conftest import Target

    target = Target("postgresql", cluster.url, "alk")
    opts = dict(target.transport_options, polling_interval=1.0)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), **env_extra}
    return target, opts, make_app(target, transport_options=opts), env


def refuse_poison(target, event: str) -> None:
    """PostgreSQL: make every ``event`` (INSERT or UPDATE) of a job on the queue 'poison'
    fail with 'refused by test' (a trigger in the test's own schema)."""
    assert event in ("INSERT", "UPDATE")
    schema = target.schema
    run_sql(
        target,
        f"""CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'refused by test'; END $$""",
    )
    run_sql(
        target,
        f"""CREATE TRIGGER refuse BEFORE {event} ON "{schema}".jobs FOR EACH ROW
        WHEN (NEW.queue = 'poison') EXECUTE FUNCTION "{schema}".refuse()""",
    )


def run_sql(target, script: str) -> None:
    """Run SQL (one statement or a script) on the target's database, outside the store,
    as a migration tool or an operator would."""
    if target.engine == "postgresql":
        with psycopg.connect(target.url, autocommit=True) as conn:
            conn.execute(script)
    else:
        conn = sqlite3.connect(target.url.removeprefix("sqlite:///"))
        try:
            conn.executescript(script)
        finally:
            conn.close()


def sql_rows(target, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """One statement (``?`` placeholders) on the target's database, outside the store,
    as another program would run it (an older worker, an operator); its rows, if any."""
    if target.engine == "postgresql":
        with psycopg.connect(target.url, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    conn = sqlite3.connect(target.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def lease_held_elsewhere(target) -> None:
    """Another worker holds the maintenance lease (for 10 minutes): no worker or consumer
    a test starts runs a maintenance round or rotates."""
    with target.open() as store:
        assert store.lease_acquire(LEASE, "another-worker", 600)


@contextmanager
def consumer_in_hub(target, prefetch_count: int | None = None) -> Iterator[tuple]:
    """A kombu consumer of queue "q" registered with a real kombu ``Hub`` (the event loop a
    Celery worker runs): ``(connection, consumer, messages received, hub)``; closed after."""
    conn = Connection(target.broker_url, transport_options=target.transport_options)
    conn.connect()
    hub = Hub()
    got: list = []
    consumer = conn.Consumer(
        [Queue("q", routing_key="q")], callbacks=[lambda body, message: got.append(message)]
    )
    if prefetch_count is not None:
        consumer.qos(prefetch_count=prefetch_count)
    consumer.consume()
    conn.transport.register_with_event_loop(conn.connection, hub)
    try:
        yield conn, consumer, got, hub
    finally:
        conn.close()
        hub.close()


def run_until(hub, predicate: Callable[[], object], timeout: float = 10) -> None:
    """Turn the event loop until ``predicate`` holds; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in the loop"
        hub.run_once()


def dashboard_pages(store, target, *paths: str) -> list[str]:
    """Serve the dashboard of ``store`` on a free local port, take one sample, and
    return the pages at ``paths`` (the server stopped after)."""
    import socket
    import threading
    import urllib.request

    import uvicorn

    from kombu_alkstore.web import Config, Dashboard

    dash = Dashboard(store, Config(token=None, refresh=60.0, broker_url=target.broker_url))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(dash.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 15, interval=0.02)
        dash.sampler.take()
        pages = []
        for path in paths:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                pages.append(r.read().decode())
        return pages
    finally:
        server.should_exit = True
        thread.join(15)


def cli(target, *argv: str) -> tuple[int, str, str]:
    """``kombu-alkstore`` on ``target``'s store, in this process: (code, out, err)."""
    import io

    from kombu_alkstore.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["-b", target.broker_url, "--schema", target.schema, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def cli_refused(target, capsys, *argv: str) -> str:
    """``kombu-alkstore`` run as :func:`cli` runs it, expected to refuse ``argv``: its
    error output (argparse's usage errors included, which it writes to sys.stderr),
    checked to be a non-zero exit without a traceback."""
    try:
        code, _, err = cli(target, *argv)
    except SystemExit as exc:  # argparse: usage error, exit status 2
        code, err = exc.code, ""
    err += capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    return err


def one_error_line(err: str) -> bool:
    """Whether ``err`` has exactly one line saying "error"."""
    return len([line for line in err.splitlines() if "error" in line]) == 1


def plan_nodes(plan: dict) -> Iterator[dict]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, the plan itself first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explained_plan(
    conn: psycopg.Connection, sql: str, params: dict[str, Any], prepare: bool | None = None
) -> dict:
    """The top plan node of ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of ``sql`` run on
    ``conn`` (``prepare`` as psycopg's), in a transaction rolled back: what it would
    change is not kept."""
    try:
        (doc,) = (
            conn.cursor()
            .execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params, prepare=prepare)
            .fetchone()
        )
    finally:
        conn.rollback()
    return doc[0]["Plan"]


def scans_buffers(plan: dict, relation: str) -> int:
    """Shared buffers (hit + read) of the scan nodes of ``relation`` in an ``EXPLAIN
    (ANALYZE, BUFFERS, FORMAT JSON)`` plan (its indexes' included; for jobs, its
    generations' jobs_g0…jobs_g3, migration 0017)."""
    return sum(
        int(n["Shared Hit Blocks"]) + int(n["Shared Read Blocks"])
        for n in plan_nodes(plan)
        if scans(n, relation)
    )


def scans(node: dict, relation: str) -> bool:
    """Whether a plan node scans ``relation`` or one of its parts (jobs' generations,
    jobs_g0…jobs_g3, migration 0017)."""
    name = node.get("Relation Name", "")
    return "Scan" in node["Node Type"] and re.fullmatch(rf"{re.escape(relation)}(_g\d)?", name)


def index_parts(conn: psycopg.Connection, index: str) -> set[str]:
    """The names of ``index`` (as written in SQL) and of its parts on each part of its
    table (jobs' generations)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_partition_tree(%s::regclass) t "
        "JOIN pg_class c ON c.oid = t.relid",
        (index,),
    ).fetchall()
    return {name for (name,) in rows}


def sqlite_steps(store, names: Sequence[str], **params: Any) -> int:
    """SQLite virtual machine instructions (``sqlite3``'s progress handler) of the
    SQLite ``store``'s own statements ``names``, run in order on a connection of our own
    in a write transaction rolled back, with the parameters a claim of 10 from queue
    ``q`` binds now (``params`` added)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    bound = {"queues": json.dumps(["q"]), "limit": 10, "now": time.time(), "ids": "[]"}
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.set_progress_handler(count, 1)
        for name in names:
            conn.execute(store._sql[name], {**bound, **params}).fetchall()
        conn.set_progress_handler(None, 1)
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return steps


def blocks_read(
    conn: psycopg.Connection, table: str, sql: str, params: dict[str, Any] | Sequence[Any]
) -> int:
    """Blocks (hit + read) ``sql`` reads from ``table`` (as written in SQL; a table in
    parts, as jobs' generations, with every part) and its indexes, run on ``conn`` in a
    transaction rolled back: the backend's own counts before and after it, in that
    transaction (a backend's counts reach the shared statistics only between
    transactions)."""
    count = (
        "WITH parts AS (SELECT relid FROM pg_partition_tree(%(t)s::regclass) "
        "UNION SELECT %(t)s::regclass) "
        "SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid)) FROM pg_class c "
        "WHERE c.oid IN (SELECT relid FROM parts) "
        "OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT relid FROM parts))"
    )
    try:
        (before,) = conn.execute(count, {"t": table}).fetchone()
        conn.execute(sql, params).fetchall()
        (after,) = conn.execute(count, {"t": table}).fetchone()
    finally:
        conn.rollback()
    return int(after) - int(before)


def throttle(store, queue: str = "q") -> None:
    """``queue`` with four due jobs at priorities 0 and 1 and a rate of one an hour,
    which its first claim has used up: no claim takes anything for an hour."""
    store.set_rate(queue, "1/h")
    store.enqueue_many([NewJob(queue, b"{}", priority=n % 2) for n in range(4)])
    assert len(store.claim([queue], 10)) == 1
    assert store.claim([queue], 10) == []


def delay(store, queue: str, first: float, count: int) -> None:
    """``count`` jobs of ``queue`` at priorities 0 and 1, the first due at ``first``
    (epoch seconds), each a second after the one before."""
    store.enqueue_many(
        [NewJob(queue, b"{}", priority=n % 2, run_at=first + n) for n in range(count)]
    )


def parts_sum(conn: psycopg.Connection, table: str, expression: str) -> int:
    """The sum of ``expression`` (over ``relid`` and ``pg_stat_user_tables``' columns)
    for ``table`` (as written in SQL) and each of its parts (jobs' generations)."""
    (total,) = conn.execute(
        f"SELECT sum({expression}) FROM pg_stat_user_tables WHERE relid IN "
        "(SELECT relid FROM pg_partition_tree(%(t)s::regclass) UNION SELECT %(t)s::regclass)",
        {"t": table},
    ).fetchone()
    return int(total or 0)


def table_pages(conn: psycopg.Connection, table: str) -> int:
    """The pages of ``table``'s heap (as written in SQL), its parts' summed (jobs'
    generations)."""
    return parts_sum(conn, table, "pg_relation_size(relid) / current_setting('block_size')::int")


#: Seconds a test waits for the xmin horizon: another test's leftover session may pin it.
HORIZON_PATIENCE = 120.0
#: Who holds the horizon back, for the message of a VACUUM that could not truncate.
HORIZON_HOLDERS = (
    "SELECT pid, application_name, state, backend_xmin, backend_xid, xact_start "
    "FROM pg_stat_activity WHERE backend_xmin IS NOT NULL OR backend_xid IS NOT NULL"
)


def past_the_horizon(conn: psycopg.Connection, done: Callable[[], object]) -> None:
    """Call ``done`` every 0.5 s until it is truthy: what it waits for needs the xmin
    horizon past a pin, and a transaction elsewhere in the database (another test's
    leftover session) may hold it back for a while. After HORIZON_PATIENCE it fails,
    naming who holds the horizon."""
    end = time.monotonic() + HORIZON_PATIENCE
    while not done():
        assert time.monotonic() < end, conn.execute(HORIZON_HOLDERS).fetchall()
        time.sleep(0.5)


def vacuumed_away(conn: psycopg.Connection, table: str) -> None:
    """VACUUM ``table`` until it is truncated to nothing (its rows all gone)."""

    def truncated() -> bool:
        conn.execute(f"VACUUM {table}")
        return table_pages(conn, table) == 0

    past_the_horizon(conn, truncated)


def bloat_offers(conn: psycopg.Connection, offers: str) -> None:
    """The offers table past the hand-off's gate (8 pages): 1,500 versions of one row,
    each UPDATE's old one kept by a pin the caller holds, then the row deleted."""
    conn.execute(f"INSERT INTO {offers} (pid, chan, queues, slots) VALUES (0, 0, '{{}}', 0)")
    for i in range(1500):
        conn.execute(f"UPDATE {offers} SET slots = %s WHERE pid = 0", (i,))
    conn.execute(f"DELETE FROM {offers} WHERE pid = 0")
    assert table_pages(conn, offers) > 8


def vacuum_analyze(conn: psycopg.Connection, table: str) -> None:
    """``VACUUM ANALYZE`` of ``table``'s parts holding pages (jobs' generations), as the
    maintenance holder's statistics refresh analyzes them: a generation analyzed empty
    is planned as empty (a sequential scan) until a rotation truncates it, which these
    tests, rotating nothing, would never see."""
    parts = conn.execute(
        "SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) "
        "WHERE isleaf AND pg_relation_size(relid) > 0",
        (table,),
    ).fetchall()
    for (part,) in parts:
        conn.execute(f"VACUUM ANALYZE {part}")
