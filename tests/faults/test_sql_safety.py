"""SQL safety: no queue, exchange, routing-key or message value ever becomes SQL text.

Every statement the package issues is captured at the driver (psycopg ``Cursor.execute`` /
``executemany``; sqlite3 through a ``Connection``/``Cursor`` subclass installed by wrapping
``sqlite3.connect``) while a workload runs through every layer: kombu (direct, topic and
fanout exchanges, publish, get, ack, requeue, reject, purge, passive declare, unbind,
deletes), a real Celery worker, the store API (claims, heartbeats, retries, dead letters,
sweeps, leases, schedules), the beat API, the operator CLI and transactional publish.
Every value carries a marker; no captured statement text may contain it. As a positive
control the marker must reach the driver as a parameter (psycopg) or show up in SQLite's
expanded trace (``set_trace_callback``), so the scan is known to see the values.
"""

from __future__ import annotations

import io
import sqlite3
import threading
import time

import psycopg
import pytest
from kombu import Connection, Exchange, Producer, Queue

import kombu_alkstore
from celery_beat_alkstore import api as beat_api
from kombu_alkstore.cli import main as cli_main
from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import open_store
from kombu_alkstore.store.schema import ddl_statements
from tests.helpers import make_app, thread_worker, wait_for

#: In every value; letters outside hex so no schema name or generated id can contain it.
TOK = "QzvINJ"

ODD = [
    "'; DROP TABLE x; --",
    '"; DROP TABLE x; --',
    "%(queue)s %s ? :queue $1 {jobs} {{}}",
    "名前 ünï 🎉",
    "back\\slash\n\ttab",
    "$$ $q$ ' '' E'\\x00'",
    "a.b.*.#",
    "x" * 300,
]


def odd(i: int, what: str = "") -> str:
    return f"{ODD[i % len(ODD)]}{what}{TOK}{i}"


class Capture:
    """Statement texts (and parameters) seen at the driver."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements: list[str] = []
        self.params: list[str] = []
        self.expanded: list[str] = []

    def add(self, query, params, cursor=None) -> None:
        if isinstance(query, (bytes, bytearray, memoryview)):
            text = bytes(query).decode("utf-8", "replace")
        elif isinstance(query, psycopg.sql.Composable):
            text = query.as_string(cursor.connection if cursor is not None else None)
        else:
            text = str(query)
        with self.lock:
            self.statements.append(text)
            self.params.append(repr(params))

    def trace(self, expanded: str) -> None:
        with self.lock:
            self.expanded.append(expanded)

    def leaks(self, marker: str = TOK) -> list[str]:
        with self.lock:
            return [s for s in self.statements if marker in s]


@pytest.fixture
def capture(monkeypatch):
    cap = Capture()

    for name in ("execute", "executemany"):
        original = getattr(psycopg.Cursor, name)

        def wrapped(self, query, params=None, *args, _original=original, **kwargs):
            cap.add(query, params, self)
            return _original(self, query, params, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, name, wrapped)

    class TracingCursor(sqlite3.Cursor):
        def execute(self, sql, *args):
            cap.add(sql, args)
            return super().execute(sql, *args)

        def executemany(self, sql, *args):
            cap.add(sql, args)
            return super().executemany(sql, *args)

        def executescript(self, script):
            cap.add(script, None)
            return super().executescript(script)

    class TracingConnection(sqlite3.Connection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.set_trace_callback(cap.trace)

        def cursor(self, factory=TracingCursor):
            return super().cursor(factory)

        def execute(self, sql, *args):
            cap.add(sql, args)
            return super().execute(sql, *args)

        def executemany(self, sql, *args):
            cap.add(sql, args)
            return super().executemany(sql, *args)

        def executescript(self, script):
            cap.add(script, None)
            return super().executescript(script)

    original_connect = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", TracingConnection)
        return original_connect(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return cap


def cli(target, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["-b", target.broker_url, "--schema", target.schema, *argv], out, err)
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------ workload
def kombu_workload(target) -> None:
    opts = target.transport_options
    with Connection(target.broker_url, transport_options=opts) as conn:
        channel = conn.channel()
        for i in range(len(ODD)):
            queue = Queue(
                odd(i, "q"),
                Exchange(odd(i, "x"), "direct"),
                routing_key=odd(i, "rk"),
                queue_arguments={"x-message-ttl": 600_000, "x-expires": 3_600_000},
            )
            simple = conn.SimpleQueue(queue)
            headers = {"id": odd(i, "task-id"), "h": odd(i, "header")}
            simple.put({"v": odd(i, "body")}, headers=headers, priority=i % 10)
            message = simple.get(timeout=10)
            assert message.payload == {"v": odd(i, "body")}
            assert message.headers["h"] == odd(i, "header")
            message.ack()
            simple.put(odd(i, "again"), headers=headers, expiration=600)
            message = simple.get(timeout=10)
            message.requeue()  # reject(requeue=True): back at once on a first delivery
            message = simple.get(timeout=10)
            message.reject()  # to the dead letters
            simple.put(odd(i, "purged"))
            bound = queue.bind(channel)
            assert bound.queue_declare(passive=True).message_count == 1
            assert bound.purge() == 1
            bound.unbind_from(queue.exchange, routing_key=odd(i, "rk"))
            simple.close()

        fan = Exchange(odd(1, "fanout"), "fanout")
        topic = Exchange(odd(2, "topic"), "topic")
        fq = [Queue(odd(i, "fq"), fan) for i in range(3)]
        tq = Queue(odd(3, "tq"), topic, routing_key=f"a.*.{TOK}")
        for q in [*fq, tq]:
            q.bind(channel).declare()
        producer = Producer(channel)
        producer.publish({"fan": odd(4, "fanbody")}, exchange=fan, routing_key=odd(5, "rk"))
        producer.publish({"t": odd(6, "tbody")}, exchange=topic, routing_key=f"a.b.{TOK}")
        for q in [*fq, tq]:
            with conn.SimpleQueue(q) as simple:
                simple.get(timeout=10).ack()
        for q in fq:
            q.bind(channel).delete()
        topic.bind(channel).delete()
        channel.close()


def store_workload(target) -> None:
    with target.open() as store:
        q = odd(0, "sq")
        store.queue_declare(q, message_ttl=600, expires=3600)
        store.touch_queues([q, odd(1, "sq")])
        ids = [
            store.enqueue(q, odd(i, "sbody").encode(), msg_id=odd(i, "smsg"), priority=i)
            for i in range(5)
        ]
        store.enqueue(q, b"later", msg_id=odd(5, "smsg"), delay=3600)
        store.enqueue(q, b"expired", msg_id=odd(6, "smsg"), expires_at=time.time() - 1)
        assert store.size(q) >= 6
        assert store.next_due([q, odd(2, "sq")]) is not None
        store.counts([q, odd(3, "sq")])
        store.counts()
        first = store.claim([q, odd(4, "sq")], 2)
        store.heartbeat(first)
        store.heartbeat(first, extend=60)
        store.release(first)
        claimed = store.claim([q], 5)
        store.retry(claimed[:1], delay=0)
        store.requeue(claimed[1:2])
        store.fail(claimed[2:], odd(7, "error"))
        store.ack(store.claim([q], 10))
        store.sweep()
        assert store.get_job(odd(2, "smsg")) is not None
        store.get_job(ids[0])
        dead = store.dead_list(queue=q)
        assert dead
        store.dead_requeue(ids=[dead[0].id])
        store.dead_requeue(queue=q)
        store.fail(store.claim([q], 10), odd(8, "error"))
        store.dead_purge(queue=q)
        store.dead_purge(ids=[1, 2])
        store.purge(q)
        store.exchange_declare(odd(1, "sx"), "topic")
        assert store.exchange_type(odd(1, "sx")) == "topic"
        store.bind(odd(1, "sx"), odd(1, "srk"), q)
        assert store.bindings(odd(1, "sx"))
        store.unbind(odd(1, "sx"), odd(1, "srk"), q)
        store.exchange_delete(odd(1, "sx"))
        assert store.queue_exists(q)
        store.queue_delete(q)
        store.routing_version()
        lease, owner = odd(2, "lease"), odd(3, "owner")
        assert store.lease_acquire(lease, owner, 30)
        assert store.lease_holder(lease) == owner
        assert not store.lease_acquire(lease, odd(4, "other"), 30)
        store.lease_release(lease, owner)

        name = odd(5, "schedule")
        beat_api.schedule(
            name,
            "@every 10s",
            f"task.{TOK}",
            args=[odd(6, "arg")],
            kwargs={odd(7, "k"): odd(8, "v")},
            options={"queue": odd(1, "bq")},
            store=store,
        )
        assert [s.name for s in beat_api.list_schedules(store=store)] == [name]
        with store.schedule_tick() as tick:
            for row in tick.due(time.time() + 3600):
                store.enqueue(odd(1, "bq"), odd(2, "tick").encode(), msg_id=odd(3, "tick"))
                tick.advance(row.name, row.next_at, row.next_at + row.interval)
        assert beat_api.unschedule(name, store=store)


def cli_workload(target) -> None:
    with target.open() as store:
        q = odd(1, "cq")
        for i in range(3):
            store.enqueue(q, b"{}", msg_id=odd(i, "cmsg"))
        store.fail(store.claim([q], 3), odd(9, "error"))
    assert cli(target, "status", "--queue", q)[0] == 0
    assert cli(target, "dead", "list", "--queue", q)[0] == 0
    assert cli(target, "dead", "show", odd(0, "cmsg"))[0] == 0
    assert cli(target, "dead", "requeue", odd(1, "cmsg"))[0] == 0
    assert cli(target, "dead", "requeue", "--queue", q)[0] == 0
    with target.open() as store:
        store.fail(store.claim([q], 3), odd(9, "error"))
    assert cli(target, "dead", "purge", "--queue", q, "-f")[0] == 0
    assert cli(target, "sweep")[0] == 0


def transaction_workload(target) -> None:
    opts = target.transport_options
    q = Queue(odd(2, "txq"), Exchange(odd(2, "txx")), routing_key=odd(2, "txrk"))
    if target.engine == "postgresql":
        db = psycopg.connect(target.url)
    else:
        db = sqlite3.connect(target.url.removeprefix("sqlite:///"))
    with Connection(target.broker_url, transport_options=opts) as conn:
        simple = conn.SimpleQueue(q)
        with kombu_alkstore.transaction(db):
            simple.put({"tx": odd(3, "txbody")}, headers={"id": odd(4, "txid")})
        db.commit()
        assert simple.get(timeout=10).payload == {"tx": odd(3, "txbody")}
        simple.close()
    db.close()


def celery_workload(target) -> None:
    queue = Queue(odd(0, "cel"), Exchange(odd(0, "celx")), routing_key=odd(0, "celrk"))
    app = make_app(target, task_queues=[queue], task_default_queue=odd(0, "cel"))
    seen = []

    @app.task(shared=False, name=f"tasks.{TOK}")
    def echo(value):
        seen.append(value)

    with thread_worker(app):
        echo.apply_async((odd(1, "arg"),), task_id=odd(2, "tid"), queue=queue)
        echo.apply_async((odd(3, "arg"),), task_id=odd(4, "tid"), countdown=0.5, expires=600)
        wait_for(lambda: len(seen) == 2, 30)


def test_no_value_is_ever_sql_text(target, capture):
    kombu_workload(target)
    store_workload(target)
    cli_workload(target)
    transaction_workload(target)
    celery_workload(target)

    assert len(capture.statements) > 100
    leaks = capture.leaks()
    assert leaks == [], "values interpolated into SQL:\n" + "\n---\n".join(leaks[:5])
    # Positive control: the values did reach the driver, as parameters.
    if target.engine == "postgresql":
        assert sum(TOK in p for p in capture.params) > 50
    else:
        assert sum(TOK in e for e in capture.expanded) > 50
    # Nothing but the schema (a validated identifier) ever varies the statement text:
    # the package issues a bounded set of distinct statements, whatever the values
    # (152 on PostgreSQL at schema version 14, most of them the migrations').
    distinct = set(capture.statements)
    assert len(distinct) < 200, len(distinct)


# --------------------------------------------------------------------------- the schema
BAD_SCHEMAS = [
    'a"b',
    "x; DROP TABLE y",
    "",
    "1abc",
    "a" * 49,
    "with space",
    "ünï",
    "a-b",
    "a'b",
    "a\x00b",
    "public.jobs",
    5,
]


@pytest.mark.parametrize("schema", BAD_SCHEMAS, ids=repr)
def test_schema_that_is_not_an_identifier_is_refused(target, capture, schema):
    with pytest.raises(ConfigurationError, match="schema"):
        open_store(target.url, schema=schema)
    with pytest.raises(ConfigurationError, match="schema"):
        ddl_statements(schema, target.engine)
    with (
        pytest.raises(ConfigurationError, match="schema"),
        Connection(target.broker_url, transport_options={"schema": schema}) as conn,
    ):
        conn.connect()
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["-b", target.broker_url, "--schema", str(schema), "status"], out, err)
    assert code != 0
    assert "schema" in err.getvalue() and err.getvalue().count("\n") == 1, err.getvalue()
    # Refused before a single statement reached the database.
    assert capture.statements == []
