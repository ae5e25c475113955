"""Shared fixtures: every test gets its own PostgreSQL schema or its own SQLite file.

PostgreSQL is required: a test that needs it fails (never skips) when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from kombu_alkstore.store import Store, close_all_stores, open_store

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
ENGINES = ["postgresql", "sqlite"]


@dataclass(frozen=True)
class Target:
    """Where one test's store lives: a database URL plus a private schema name."""

    engine: str
    url: str
    schema: str

    @property
    def broker_url(self) -> str:
        return f"alkstore+{self.url}"

    @property
    def transport_options(self) -> dict:
        return {"schema": self.schema}

    def open(self, **options) -> Store:
        return open_store(self.url, schema=self.schema, **options)


def _drop_schema(schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def make_target(engine: str, tmp_path) -> Target:
    schema = "t_" + uuid.uuid4().hex[:12]
    if engine == "postgresql":
        try:
            psycopg.connect(PG_URL, connect_timeout=5).close()
        except psycopg.OperationalError as exc:  # fail, never skip
            pytest.fail(f"PostgreSQL is required for this test and is not reachable: {exc}")
        return Target(engine, PG_URL, schema)
    return Target(engine, f"sqlite:///{tmp_path / 'broker.db'}", schema)


@pytest.fixture(autouse=True)
def _close_celery_apps():
    """Close every app a test made, so its broker connections do not outlive the test."""
    from tests import helpers

    yield
    while helpers.APPS:
        app = helpers.APPS.pop()
        with contextlib.suppress(Exception):  # a broken connection has nothing to close
            app.close()
    # Whatever a test left open (stores, pools, LISTEN connections) goes now: the shared
    # PostgreSQL allows a limited number of clients for the whole run.
    close_all_stores()


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture
def target(engine, tmp_path) -> Iterator[Target]:
    t = make_target(engine, tmp_path)
    yield t
    if engine == "postgresql":
        _drop_schema(t.schema)


@pytest.fixture
def pg_target(tmp_path) -> Iterator[Target]:
    t = make_target("postgresql", tmp_path)
    yield t
    _drop_schema(t.schema)


@pytest.fixture
def sqlite_target(tmp_path) -> Target:
    return make_target("sqlite", tmp_path)


@pytest.fixture
def store(target) -> Iterator[Store]:
    s = target.open()
    yield s
    s.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the upstream suites collected, in the background (tests/upstream/early.py)."""
    if session.config.option.collectonly:
        return
    from tests.upstream import early

    early.begin({item.path.name for item in session.items}, session.config._tmp_path_factory.mktemp)


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.upstream import early

    early.end()
