"""kombu's integration classes (``t/integration/common.py``) against alkstore.

Not collected from here: ``test_kombu_suite.py`` copies this file next to the ``common.py``
of the installed kombu's sdist (as ``t/integration/test_alkstore.py``) and runs pytest on
it in a subprocess, the way kombu's own ``test_redis.py`` and ``test_py_amqp.py`` subclass
the same classes with their ``connection`` fixtures.

Every test gets a fresh PostgreSQL schema or a fresh SQLite file. Priority: alkstore, like
AMQP, delivers higher numbers first, so the classes' default ``PRIORITY_ORDER = 'asc'``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

import kombu
import psycopg
import pytest

import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)
from kombu_alkstore.store import close_all_stores

from .common import (
    BaseEventLoop,
    BaseExchangeTypes,
    BaseFailover,
    BaseMessage,
    BasePriority,
    BaseTimeToLive,
    BasicFunctionality,
)

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: A PostgreSQL URL where nothing listens (the first, dead entry of a failover list).
DEAD_PG_URL = "postgresql://postgres@127.0.0.1:1/test"


def _drop_schema(schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["postgresql", "sqlite"])
def engine(request) -> str:
    return request.param


@pytest.fixture
def target(engine, tmp_path):
    """(broker URL, transport options) of a fresh store; dropped after the test."""
    schema = "k_" + uuid.uuid4().hex[:12]
    if engine == "postgresql":
        try:
            psycopg.connect(PG_URL, connect_timeout=5).close()
        except psycopg.OperationalError as exc:  # fail, never skip
            pytest.fail(f"PostgreSQL is required and is not reachable: {exc}")
        yield f"alkstore+{PG_URL}", {"schema": schema}
        close_all_stores()
        _drop_schema(schema)
    else:
        yield f"alkstore+sqlite:///{tmp_path / 'broker.db'}", {}
        close_all_stores()


@contextlib.contextmanager
def _released(conn: kombu.Connection):
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):  # a test may have closed it already
            conn.release()


@pytest.fixture
def connection(target):
    url, options = target
    with _released(kombu.Connection(url, transport_options=options)) as conn:
        yield conn


@pytest.fixture
def invalid_connection(engine, tmp_path):
    """A connection that cannot be made: nothing listens (PostgreSQL), a directory that
    does not exist (SQLite)."""
    if engine == "postgresql":
        url = f"alkstore+{DEAD_PG_URL}?connect_timeout=2"
    else:
        url = f"alkstore+sqlite:///{tmp_path / 'no-such-dir' / 'broker.db'}"
    with _released(kombu.Connection(url)) as conn:
        yield conn


@pytest.fixture
def failover_connection(tmp_path):
    """``dead;live`` on PostgreSQL: failover lists are lists of servers (kombu's tests
    check that the port changes). An SQLite file has no server to fail over to.

    ``port=1`` repeats the dead URL's port: kombu takes the first entry of a
    ``transport+URL`` list as the transport's hostname without parsing its port (it
    parses the alternates' at the switch), and kombu's test checks ``conn.port``."""
    schema = "k_" + uuid.uuid4().hex[:12]
    url = f"alkstore+{DEAD_PG_URL};alkstore+{PG_URL}"
    conn = kombu.Connection(url, port=1, transport_options={"schema": schema})
    with _released(conn):
        yield conn
    close_all_stores()
    _drop_schema(schema)


class test_AlkstoreBasicFunctionality(BasicFunctionality):
    pass


class test_AlkstoreBaseExchangeTypes(BaseExchangeTypes):
    pass


class test_AlkstoreBaseTimeToLive(BaseTimeToLive):
    pass


class test_AlkstorePriority(BasePriority):
    """Higher numbers first, as AMQP (the classes' default order). ``drain_events``
    delivers one message per call, as kombu's Redis transport does (its
    ``test_RedisPriority`` drains once per message; here Celery before 5.7 needs it: its
    ``rpc://`` results wait for a drain to time out when one delivered several), while
    these tests drain once for three messages: each drain here also takes the messages
    already waiting, the order under test unchanged."""

    PRIORITY_ORDER = "asc"

    @pytest.fixture
    def connection(self, connection):
        drain = connection.drain_events

        def drain_waiting(timeout=None):
            drain(timeout=timeout)
            with contextlib.suppress(TimeoutError, socket.timeout):
                while True:
                    drain(timeout=0.2)

        connection.drain_events = drain_waiting
        return connection


class test_AlkstoreMessage(BaseMessage):
    pass


class test_AlkstoreEventLoop(BaseEventLoop):
    pass


class test_AlkstoreFailover(BaseFailover):
    pass
