"""Bad input, fuzzed: every input is delivered intact or refused with a clear error.

Hypothesis publishes arbitrary bodies (bytes, text, JSON with NUL and lone surrogates),
headers, content types, priorities (in and out of range), queue/exchange/routing-key names
(empty, huge, quotes, NUL, unicode, surrogates) and options (queue TTL and expiry, message
expiration) through kombu to the transport. Each example is either delivered intact (a
``SimpleQueue`` round trip compares body, headers, content type and priority), expired as
its options asked, or refused with a ``ConfigurationError`` naming the value (or kombu's
own ``UnicodeEncodeError`` for a text body with a lone surrogate). After each example the
tables hold no half-written row: every row of ``jobs`` and ``dead`` has its queue and
body, and the body decodes as a message envelope. A real worker keeps running while
garbage is published (undecodable messages are dead-lettered), and malformed URLs and
option values give one clear line.

``ALKSTORE_FUZZ_EXAMPLES`` scales the number of examples (default sized for CI).
"""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection, Exchange, Queue
from kombu.exceptions import OperationalError
from kombu.serialization import registry

import kombu_alkstore  # noqa: F401
from kombu_alkstore.errors import (
    AlkstoreError,
    ConfigurationError,
    SchemaMissing,
    StoreUnavailable,
)
from kombu_alkstore.store import StoreOptions
from kombu_alkstore.transport.options import TransportOptions
from tests.helpers import ROOT, kill_group, make_app, run_solo_worker, thread_worker, wait_for

SCALE = float(os.environ.get("ALKSTORE_FUZZ_EXAMPLES", "1"))


def fuzz_settings(examples: int):
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# ----------------------------------------------------------------------------- strategies
#: Every code point, NUL and lone surrogates included.
ANY_CHAR = st.characters(exclude_categories=())
SPECIAL_NAMES = [
    "",
    " ",
    "'",
    '"',
    "''",
    "'; DROP TABLE jobs; --",
    '"; DROP TABLE jobs; --',
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "名前",
    "🎉",
    "%s",
    "%(queue)s",
    ":queue",
    "?",
    "{jobs}",
    "\\",
    "a.b.*.#",
    "a" * 1024,
    "a" * 1025,
    "é" * 1024,
    " leading and trailing ",
]
names = st.one_of(st.sampled_from(SPECIAL_NAMES), st.text(ANY_CHAR, max_size=24))
#: Header keys kombu or the transport give a meaning (tested on their own below).
SPECIAL_HEADERS = {"id", "eta", "expires", "compression"}
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(ANY_CHAR, max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(ANY_CHAR, max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
headers_st = st.dictionaries(
    st.text(ANY_CHAR, max_size=10).filter(lambda k: k not in SPECIAL_HEADERS),
    json_values,
    max_size=4,
)
content_types = st.one_of(
    st.sampled_from(["application/octet-stream", "application/x-fuzz", "x/\x00y", "😀/😀"]),
    st.text(ANY_CHAR, min_size=1, max_size=20),
).filter(lambda c: c not in registry._decoders)
bodies = st.one_of(
    st.tuples(st.just("raw"), st.binary(max_size=4096), content_types),
    st.tuples(st.just("text"), st.text(ANY_CHAR, max_size=300), st.just("text/plain")),
    st.tuples(st.just("json"), json_values, st.just("application/json")),
)
priorities = st.one_of(
    st.none(),
    st.integers(0, 255),
    st.integers(-(10**6), 10**6),
    st.sampled_from([True, False, 1.5, 5.0, "7", float("nan"), -1, 256]),
)
#: Queue arguments in ms: None, valid, tiny (the message may expire first), or invalid.
queue_ms = st.one_of(
    st.none(),
    st.just(600_000),
    st.just("600000"),
    st.just(1),
    st.sampled_from([0, -5, float("nan"), float("inf"), float("-inf"), "abc", ""]),
)
#: kombu's ``expiration`` is in seconds (it sends ms): None, valid, lapsed, or invalid.
expirations = st.one_of(st.none(), st.just(600), st.sampled_from([0, -5, 0.0001]))


@dataclass
class Case:
    queue: str
    exchange: str
    xtype: str
    routing_key: str
    body: tuple
    headers: dict
    priority: Any
    ttl: Any = None
    expires: Any = None
    expiration: Any = None
    extra_headers: dict = field(default_factory=dict)

    @property
    def must_expire(self) -> bool:
        return self.expiration is not None and self.expiration <= 0.0001

    @property
    def may_expire(self) -> bool:
        return self.must_expire or self.ttl == 1


@st.composite
def cases(draw) -> Case:
    queue, exchange, rk = draw(names), draw(names), draw(names)
    xtype = draw(st.sampled_from(["direct", "fanout"]))
    if exchange == "":  # the default exchange routes by queue name
        xtype, rk = "direct", queue
    return Case(
        queue=queue,
        exchange=exchange,
        xtype=xtype,
        routing_key=rk,
        body=draw(bodies),
        headers=draw(headers_st),
        priority=draw(priorities),
        ttl=draw(queue_ms),
        expires=draw(queue_ms.filter(lambda v: v != 1)),
        expiration=draw(expirations),
    )


# ------------------------------------------------------------------------------- checks
def tables(target) -> tuple[str, str]:
    if target.engine == "postgresql":
        return f'"{target.schema}".jobs', f'"{target.schema}".dead'
    return f"{target.schema}_jobs", f"{target.schema}_dead"


def rows(target, sql: str) -> list[tuple]:
    if target.engine == "postgresql":
        import psycopg

        with psycopg.connect(target.url, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []
    import sqlite3

    conn = sqlite3.connect(target.url.removeprefix("sqlite:///"), timeout=30)
    try:
        out = conn.execute(sql).fetchall()
        conn.commit()
        return out
    finally:
        conn.close()


def check_tables(target) -> list[tuple]:
    """No half-written row: every live and dead row is a whole message envelope.

    Returns the live rows (queue, state, expires_at) and empties both tables."""
    jobs, dead = tables(target)
    live = rows(target, f"SELECT queue, body, state, expires_at FROM {jobs}")
    buried = rows(target, f"SELECT queue, body, last_error FROM {dead}")
    for row in [*live, *buried]:
        queue, body = row[0], row[1]
        assert isinstance(queue, str) and queue, row
        assert body is not None, row
        envelope = json.loads(bytes(body))
        assert isinstance(envelope, dict) and isinstance(envelope.get("properties"), dict), row
        assert "body" in envelope, row
    for row in live:
        assert row[2] in ("pending", "processing"), row
    # Start the next example from empty tables: exchanges, bindings and queues persist
    # (a queue bound by an earlier example would receive this one's fanout).
    prefix = jobs[: -len("jobs")]
    for table in ("jobs", "dead", "bindings", "exchanges", "queues"):
        rows(target, f"DELETE FROM {prefix}{table}")
    rows(target, f"UPDATE {prefix}meta SET value = '0' WHERE key = 'routing_version'")
    return [(r[0], r[2], r[3]) for r in live]


REFUSAL_WORDS = (
    "queue name",
    "exchange name",
    "routing key",
    "priority",
    "message id",
    "expiration",
    "message_ttl",
    "expires",
    "eta",
    "run_at",
    "expires_at",
)


def assert_clear_refusal(exc: BaseException) -> None:
    assert isinstance(exc, ValueError), f"not a clear refusal: {exc!r}"
    assert isinstance(exc, (ConfigurationError, UnicodeEncodeError)), repr(exc)
    text = str(exc)
    assert text.strip(), f"an empty error message: {exc!r}"
    if isinstance(exc, ConfigurationError):
        assert "\n" not in text, text
        assert any(word in text for word in REFUSAL_WORDS), text


def publish_kwargs(case: Case) -> dict:
    kind, value, ctype = case.body
    kwargs: dict[str, Any] = {"headers": {**case.headers, **case.extra_headers}}
    if case.priority is not None:
        kwargs["priority"] = case.priority
    if case.expiration is not None:
        kwargs["expiration"] = case.expiration
    if kind == "json":
        kwargs["serializer"] = "json"
    else:
        kwargs["content_type"] = ctype
        kwargs["content_encoding"] = "binary" if kind == "raw" else "utf-8"
    return kwargs


def queue_arguments(case: Case) -> dict:
    args = {}
    if case.ttl is not None:
        args["x-message-ttl"] = case.ttl
    if case.expires is not None:
        args["x-expires"] = case.expires
    return args


def round_trip(target, case: Case, timeout: float = 10.0) -> str:
    """Publish ``case`` through kombu and read it back: 'delivered', 'expired' or 'refused'."""
    kind, value, ctype = case.body
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        try:
            queue = Queue(
                case.queue,
                Exchange(case.exchange, case.xtype),
                routing_key=case.routing_key,
                queue_arguments=queue_arguments(case),
            )
            simple = conn.SimpleQueue(queue)
        except ValueError as exc:
            assert_clear_refusal(exc)
            return "refused"
        try:
            try:
                simple.put(value, **publish_kwargs(case))
            except ValueError as exc:
                assert_clear_refusal(exc)
                return "refused"
            try:
                message = simple.get(timeout=1.0 if case.may_expire else timeout)
            except simple.Empty:
                assert case.may_expire, f"published, never delivered: {case!r}"
                return "expired"
            assert not case.must_expire, "delivered after its expiration"
            if kind == "json":
                assert message.payload == value
            elif kind == "text":  # kombu hands an empty body back undecoded
                assert (message.payload or "") == value
            else:
                assert message.body == value
                assert message.content_type == ctype
            assert message.headers == {**case.headers, **case.extra_headers}
            want = case.priority if isinstance(case.priority, int) and case.priority else 0
            assert message.properties.get("priority", 0) == want
            message.ack()
            return "delivered"
        finally:
            simple.close()


# --------------------------------------------------------------------------- properties
@pytest.fixture
def shared_store(target):
    """One connection held open for the whole test, so every example's kombu connection
    shares its process-wide store (and pool) instead of opening its own."""
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        conn.connect()
        yield conn


@fuzz_settings(40)
@given(case=cases())
def test_publish_anything_delivered_intact_or_refused(target, shared_store, case):
    outcome = round_trip(target, case)
    live = check_tables(target)
    if outcome in ("delivered", "refused"):
        assert live == [], f"{outcome}, yet rows are left: {live}"
    else:  # expired: still there (never claimable) until a sweep buries it
        assert all(r[2] is not None for r in live), live


special_values = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.floats(),
    st.text(ANY_CHAR, max_size=20),
    st.sampled_from(
        [
            "2001-01-01T00:00:00",
            "2001-01-01T00:00:00+00:00",
            "9999-12-31T23:59:59",
            "not a time",
            "",
            "0001-01-01T00:00:00",
        ]
    ),
    st.lists(st.integers(), max_size=2),
)


@fuzz_settings(25)
@given(
    header=st.sampled_from(["id", "eta", "expires"]),
    value=special_values,
    body=st.binary(max_size=64),
)
def test_headers_the_transport_reads(target, shared_store, header, value, body):
    """``id`` (task id), ``eta`` and ``expires``: delivered intact, kept for later, or
    refused naming the header."""
    case = Case(
        queue="special",
        exchange="special",
        xtype="direct",
        routing_key="special",
        body=("raw", body, "application/x-fuzz"),
        headers={},
        priority=None,
        extra_headers={header: value},
    )
    with Connection(target.broker_url, transport_options=target.transport_options) as conn:
        simple = conn.SimpleQueue(Queue("special", Exchange("special"), routing_key="special"))
        try:
            try:
                simple.put(body, **publish_kwargs(case))
            except ValueError as exc:
                assert isinstance(exc, ConfigurationError), repr(exc)
                assert "\n" not in str(exc)
                assert any(w in str(exc) for w in ("message id", "eta", "expires", "run_at"))
                assert check_tables(target) == []
                return
            try:
                message = simple.get(timeout=0.5)
            except simple.Empty:  # an eta in the future or an expiry in the past
                assert len(check_tables(target)) == 1
                return
            assert message.body == body
            if not (isinstance(value, float) and math.isnan(value)):
                assert message.headers == {header: value}
            message.ack()
            assert check_tables(target) == []
        finally:
            simple.close()


# ----------------------------------------------------------------------- known refusals
def test_huge_incompressible_name_is_stored_on_sqlite(sqlite_target):
    """A 256-character name of 4-byte characters (1024 UTF-8 bytes, the longest accepted)
    round-trips."""
    import random

    rnd = random.Random(7)
    name = "".join(chr(rnd.randrange(0x10000, 0x1F000)) for _ in range(256))
    case = Case(name, name, "direct", name, ("raw", b"x", "application/x-fuzz"), {}, None)
    assert round_trip(sqlite_target, case) == "delivered"
    assert check_tables(sqlite_target) == []


def test_huge_incompressible_name_on_postgres_is_a_configuration_error(pg_target):
    import random

    rnd = random.Random(7)
    name = "".join(chr(rnd.randrange(0x10000, 0x1F000)) for _ in range(1024))
    with pg_target.open() as store:
        for call in (
            lambda: store.enqueue(name, b"x"),
            lambda: store.queue_declare(name),
            lambda: store.exchange_declare(name, "direct"),
            lambda: store.bind(name, name, name),
        ):
            try:
                call()
            except Exception as exc:
                assert isinstance(exc, ConfigurationError), repr(exc)


NUL_OPERATIONS = {
    "exchange_declare": lambda ch, bad: ch.exchange_declare(bad, "direct"),
    "exchange_declare_passive": lambda ch, bad: ch.exchange_declare(bad, "direct", passive=True),
    "queue_declare_passive": lambda ch, bad: ch.queue_declare(bad, passive=True),
    "queue_unbind": lambda ch, bad: ch.queue_unbind("q", bad, "rk"),
    "queue_purge": lambda ch, bad: ch.queue_purge(bad),
    "queue_delete": lambda ch, bad: ch.queue_delete(bad),
    "exchange_delete": lambda ch, bad: ch.exchange_delete(bad),
    "publish_to_exchange": lambda ch, bad: ch.basic_publish(
        ch.prepare_message("x"), exchange=bad, routing_key="r"
    ),
    "basic_get": lambda ch, bad: ch.basic_get(bad),
}


@pytest.mark.parametrize("operation", sorted(NUL_OPERATIONS))
def test_nul_name_lookups_on_postgres(pg_target, operation):
    opts = pg_target.transport_options
    with (
        Connection(pg_target.broker_url, transport_options=opts) as conn,
        pytest.raises(ConfigurationError, match="NUL"),
    ):
        NUL_OPERATIONS[operation](conn.default_channel, "a\x00b")


@pytest.mark.parametrize("value", ["abc", [1], {"a": 1}])
def test_bad_queue_argument_is_a_configuration_error_naming_it(sqlite_target, value):
    with (
        Connection(
            sqlite_target.broker_url, transport_options=sqlite_target.transport_options
        ) as conn,
        pytest.raises(ConfigurationError, match="x-message-ttl|message_ttl"),
    ):
        Queue("q", queue_arguments={"x-message-ttl": value}).bind(conn.default_channel).declare()


# ------------------------------------------------------------------------ a live worker
def garbage_bodies(template: dict) -> dict[str, bytes]:
    """Rows no kombu producer would write, each next to a real task message's envelope."""

    def variant(**changes) -> bytes:
        envelope = json.loads(json.dumps(template))
        for path, value in changes.items():
            where = envelope
            *parents, leaf = path.split("__")
            for p in parents:
                where = where[p]
            where[leaf] = value
        return json.dumps(envelope).encode()

    return {
        "binary": b"\x00\xff\xfe not json at all",
        "json-array": b"[1, 2, 3]",
        "no-properties": json.dumps({"body": "", "headers": {}}).encode(),
        "properties-not-a-dict": json.dumps({"body": "", "properties": "x"}).encode(),
        "bad-base64": variant(body="!!!not base64!!!"),
        "body-not-json": variant(body=base64.b64encode(b"{not json").decode()),
        "unknown-content-type": variant(**{"content-type": "application/x-nonsense"}),
        "pickle-refused": variant(**{"content-type": "application/x-python-serialize"}),
        "unregistered-task": variant(headers__task="no.such.task"),
        "utf8-invalid": variant(body=base64.b64encode(b"\xff\xfe\xfd").decode()),
        # JSON, but not Celery's [args, kwargs, embed]: Celery's Request() raises on it.
        "args-not-a-list": variant(body=base64.b64encode(b'"just a string"').decode()),
    }


def test_worker_survives_garbage_and_dead_letters_it(target):
    app = make_app(target)
    done = []

    @app.task(shared=False, name="fuzz.ok")
    def ok(tag):
        done.append(tag)

    with target.open() as store:
        # A real task message's envelope, as the transport stores it, to mutate.
        ok.apply_async(("template",))
        (held,) = store.claim(["celery"], 1)
        template = json.loads(bytes(held.body))
        store.ack([held])
        garbage = garbage_bodies(template)
        with thread_worker(app) as worker:
            ok.delay("before")
            wait_for(lambda: "before" in done, 30)
            ids = {name: store.enqueue("celery", body) for name, body in garbage.items()}
            for i in range(3):
                ok.delay(f"after{i}")
            wait_for(lambda: {"after0", "after1", "after2"} <= set(done), 30)

            def all_dead():
                return all(
                    (job := store.get_job(i)) is not None and job.state == "dead"
                    for i in ids.values()
                )

            wait_for(all_dead, 30, interval=0.2)
            ok.delay("last")
            wait_for(lambda: "last" in done, 30)
            assert worker is not None
        for name, job_id in ids.items():
            job = store.get_job(job_id)
            assert job.state == "dead", (name, job)
            assert job.last_error, (name, job)
            assert bytes(job.body) == garbage[name], name  # kept as it came
        assert [c.pending + c.processing for c in store.counts(["celery"])] == [0]


def test_message_that_crashes_the_consumer_is_dead_lettered_and_worker_lives(sqlite_target):
    target = sqlite_target
    app = make_app(target)
    app.send_task("tests.apps.proj.mark", ("template",))
    with target.open() as store:
        (held,) = store.claim(["celery"], 1)
        envelope = json.loads(bytes(held.body))
        store.ack([held])
        envelope["body"] = base64.b64encode(b'"just a string"').decode()
        job_id = store.enqueue("celery", json.dumps(envelope).encode())
        env = dict(
            os.environ,
            ALKSTORE_TEST_BROKER=target.broker_url,
            ALKSTORE_TEST_SCHEMA=target.schema,
            ALKSTORE_TEST_RECORD="/dev/null",
            ALKSTORE_TEST_ACKS_LATE="1",
            PYTHONPATH=str(ROOT),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.apps.proj", "worker", "-P", "solo"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end and proc.poll() is None:
                job = store.get_job(job_id)
                if job is not None and job.state == "dead":
                    break
                time.sleep(0.2)
            assert proc.poll() is None, "the worker died on the message"
            assert store.get_job(job_id).state == "dead"
        finally:
            kill_group(proc)


# --------------------------------------------------------------------- beat schedules
specs = st.one_of(
    st.text(ANY_CHAR, max_size=16),
    st.sampled_from(
        [
            "@every 1s",
            "@every 0s",
            "@every -1m",
            "@every 1.5h",
            "@every 10x",
            "@every",
            "1m",
            "@every 99999999999999999999d",
            "* * * * *",
            "@daily",
            "@every 1s ",
            "",
        ]
    ),
    st.integers(-5, 10**12),
    st.floats(),
    st.timedeltas(),
    st.builds(lambda n: f"@every {n}s", st.integers(-3, 10**6)),
)


@fuzz_settings(60)
@given(name=names, spec=specs)
def test_schedule_name_and_spec_stored_or_one_clear_line(sqlite_target, name, spec):
    from celery_beat_alkstore import api as beat_api

    with sqlite_target.open() as store:
        try:
            stored = beat_api.schedule(name, spec, "fuzz.task", store=store)
        except ConfigurationError as exc:
            text = str(exc)
            assert text.strip() and "\n" not in text, text
            assert beat_api.list_schedules(store=store) == []
            return
        assert stored.name == name
        # A cron schedule has no interval (0); an @every one a positive, finite one.
        assert stored.kind == "cron" or (stored.interval > 0 and math.isfinite(stored.interval))
        assert math.isfinite(stored.next_at)
        assert [s.name for s in beat_api.list_schedules(store=store)] == [name]
        assert beat_api.unschedule(name, store=store)


# ------------------------------------------------------------------ URLs and options
MALFORMED_URLS = [
    "alkstore+://",
    "alkstore+mysql://u@h/db",
    "alkstore+postgresql://[::1/x",
    "alkstore+postgresql://h:abc/db",
    "alkstore+sqlite://",
    "alkstore+sqlite:///:memory:",
    "alkstore+postgresql+asyncpg://h/db",
    "alkstore+redis://localhost:6379/0",
]


@pytest.mark.parametrize("url", MALFORMED_URLS)
def test_malformed_url_is_one_clear_line(url):
    with pytest.raises((ConfigurationError, ValueError)) as info, Connection(url) as conn:
        conn.connect()
    text = str(info.value)
    assert text.strip() and "\n" not in text, text
    assert isinstance(info.value, ConfigurationError), repr(info.value)


option_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(),
    st.text(ANY_CHAR, max_size=12),
    st.sampled_from(["30", "0", "-1", "nan", "inf", "true", "off", "1e309", "", " 5 "]),
    st.lists(st.integers(), max_size=2),
)
OPTION_NAMES = sorted(
    (StoreOptions.names() | {f for f in TransportOptions.__dataclass_fields__}) - {"setup"}
)


@fuzz_settings(60)
@given(name=st.sampled_from(OPTION_NAMES), value=option_values)
def test_option_value_accepted_or_one_clear_line(sqlite_target, name, value):
    options = {"schema": sqlite_target.schema, name: value}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Connection(sqlite_target.broker_url, transport_options=options) as conn:
                conn.connect()
                conn.default_channel.queue_declare("q")
    except ConfigurationError as exc:
        text = str(exc)
        assert "\n" not in text and name in text, text
    except SchemaMissing:
        pass  # a new valid schema prefix with setup off
    except AlkstoreError as exc:
        pytest.fail(f"option {name}={value!r}: {exc!r}")


def _worker_output(env_extra: dict) -> tuple[int, list[str]]:
    proc = run_solo_worker(env_extra, 60)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return proc.returncode, lines


@pytest.mark.parametrize(
    "env,named",
    [
        ({"ALKSTORE_TEST_BROKER": "alkstore+mysql://u@h/db"}, "mysql"),
        (
            {
                "ALKSTORE_TEST_BROKER": "alkstore+sqlite:///{tmp}/w.db",
                "ALKSTORE_TEST_OPTIONS": json.dumps({"visibility_timeout": "soon"}),
            },
            "visibility_timeout",
        ),
        (
            {"ALKSTORE_TEST_BROKER": "alkstore+sqlite:///{tmp}/w.db"},
            "schema",
        ),
    ],
    ids=["bad-url", "bad-option", "bad-schema"],
)
def test_worker_with_bad_config_exits_with_one_clear_line(tmp_path, env, named):
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    if named == "schema":
        env["ALKSTORE_TEST_SCHEMA"] = "bad schema;"
    started = time.monotonic()
    code, lines = _worker_output(env)
    assert code != 0
    assert time.monotonic() - started < 60
    last = lines[-1]
    assert last.startswith("kombu_alkstore.errors.ConfigurationError: "), lines[-5:]
    assert named in last, last


def test_unreachable_postgres_is_a_connection_error_not_a_hang():
    """A URL that parses but reaches nothing: a connection error (retryable), quickly."""
    url = "alkstore+postgresql://postgres@127.0.0.1:1/test"
    started = time.monotonic()
    with pytest.raises((OperationalError, StoreUnavailable)), Connection(url) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
    assert time.monotonic() - started < 30
