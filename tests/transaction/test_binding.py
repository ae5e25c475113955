"""The binding itself: decorator form, nesting, threads and asyncio tasks, refused kinds,
and the store-level guarantees (multi-row enqueue, fanout, wrong or missing schema)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import closing

import psycopg
import pytest
import sqlalchemy as sa
from kombu import Connection, Exchange, Queue
from psycopg_pool import ConnectionPool
from sqlalchemy.orm import sessionmaker

import kombu_alkstore
from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob, open_store
from kombu_alkstore.transaction import current

pytestmark = pytest.mark.timeout(60)


def test_context_manager_decorator_and_nesting(target, biz, tmp_path):
    with closing(biz.connect()) as a, closing(biz.connect()) as b:
        assert current() is None
        with kombu_alkstore.transaction(a) as bound:
            assert bound is a and current() is a
            with kombu_alkstore.transaction(b):
                assert current() is b
            assert current() is a
        assert current() is None

        @kombu_alkstore.transaction(a)
        def inside():
            return current()

        assert inside() is a and current() is None
        # A decorated function running in several threads at once: one binding per call.
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(inside())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [a] * 8


def test_binding_is_per_asyncio_task(target, biz):
    with closing(biz.connect()) as conn:

        async def bound(started: asyncio.Event, release: asyncio.Event):
            async with kombu_alkstore.transaction(conn):
                started.set()
                await release.wait()
                return current()

        async def unbound(started: asyncio.Event, release: asyncio.Event):
            await started.wait()
            seen = current()
            release.set()
            return seen

        @kombu_alkstore.transaction(conn)
        async def decorated():
            await asyncio.sleep(0)
            return current()

        async def main():
            started, release = asyncio.Event(), asyncio.Event()
            one, two = await asyncio.gather(bound(started, release), unbound(started, release))
            return one, two, await decorated(), current()

        one, two, three, after = asyncio.run(main())
        assert one is conn and two is None and three is conn and after is None


def test_decorated_function_publishes_in_the_callers_transaction(target, biz):
    with target.open() as store, closing(biz.connect()) as conn:

        @kombu_alkstore.transaction(conn)
        def place_order(item):
            biz.insert(conn, item)
            store.enqueue("orders", item.encode())

        place_order("pen")
        assert biz.live(store, "orders") == 0
        conn.rollback()
        place_order("ink")
        conn.commit()
        assert biz.live(store, "orders") == 1
        assert biz.items() == ["ink"]


def test_refused_kinds_are_named_up_front(target):
    with pytest.raises(ConfigurationError, match="got None"):
        kombu_alkstore.transaction(None)
    engine = sa.create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match="Engine"):
        kombu_alkstore.transaction(engine)
    with pytest.raises(ConfigurationError, match="sessionmaker"):
        kombu_alkstore.transaction(sessionmaker(engine))
    pool = ConnectionPool("postgresql://nowhere", open=False)
    with pytest.raises(ConfigurationError, match="pool"):
        kombu_alkstore.transaction(pool)

    class AsyncLike:
        async def execute(self, *args):  # the shape of psycopg.AsyncConnection
            pass

    with pytest.raises(ConfigurationError, match="asyncio"):
        kombu_alkstore.transaction(AsyncLike())


def test_multi_row_enqueue_on_a_fresh_connection_joins_its_transaction(target, biz):
    """Several rows at once (a fanout, enqueue_many) on a connection that has not begun a
    transaction yet: psycopg would COMMIT a bare ``conn.transaction()`` block there."""
    with target.open() as store, closing(biz.connect()) as conn:
        with kombu_alkstore.transaction(conn):
            store.enqueue_many([NewJob("q", b"1"), NewJob("q", b"2"), NewJob("q", b"3")])
        conn.rollback()
        assert biz.live(store, "q") == 0
        with kombu_alkstore.transaction(conn):
            store.enqueue_many([NewJob("q", b"1"), NewJob("q", b"2")])
        assert biz.live(store, "q") == 0
        conn.commit()
        assert biz.live(store, "q") == 2


def test_kombu_fanout_publish_commits_or_rolls_back(target, biz):
    with (
        target.open() as store,
        closing(biz.connect()) as conn,
        Connection(target.broker_url, transport_options=target.transport_options) as kc,
    ):
        fan = Exchange("fan", "fanout")
        for i in range(3):
            Queue(f"fan-{i}", fan)(kc.default_channel).declare()
        producer = kc.Producer()
        with kombu_alkstore.transaction(conn):
            producer.publish({"n": 1}, exchange=fan, routing_key="")
        conn.rollback()
        assert [biz.live(store, f"fan-{i}") for i in range(3)] == [0, 0, 0]
        with kombu_alkstore.transaction(conn):
            producer.publish({"n": 2}, exchange=fan, routing_key="")
        conn.commit()
        assert [biz.live(store, f"fan-{i}") for i in range(3)] == [1, 1, 1]


def test_missing_schema_is_named(pg_target):
    with pg_target.open() as store, closing(psycopg.connect(pg_target.url)) as conn:
        store.enqueue("q", b"warm")  # the broker worked
        with psycopg.connect(pg_target.url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{pg_target.schema}" CASCADE')
        with (
            kombu_alkstore.transaction(conn),
            pytest.raises(ConfigurationError, match="schema missing") as err,
        ):
            store.enqueue("q", b"x")
        assert pg_target.schema in str(err.value)


def test_same_schema_in_another_database_is_refused(pg_target):
    """Another database that has alkstore tables under the same schema name is still
    another broker: refused, naming both."""
    elsewhere = pg_target.url.rsplit("/", 1)[0] + "/postgres"
    try:
        with (
            pg_target.open() as store,
            open_store(elsewhere, schema=pg_target.schema),
            closing(psycopg.connect(elsewhere)) as conn,
        ):
            with (
                kombu_alkstore.transaction(conn),
                pytest.raises(ConfigurationError, match="'postgres'") as err,
            ):
                store.enqueue("q", b"x")
            assert "/test" in str(err.value) and "schema missing" not in str(err.value)
            conn.rollback()
            with psycopg.connect(elsewhere, autocommit=True) as other:
                count = other.execute(f'SELECT count(*) FROM "{pg_target.schema}".jobs')
                assert count.fetchone()[0] == 0
    finally:
        with psycopg.connect(elsewhere, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{pg_target.schema}" CASCADE')
