"""SQLAlchemy: a Session (and a bare Connection) carries the publish, with a real worker."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import kombu_alkstore
from tests.helpers import make_app, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)


def test_session_commit_rollback_and_savepoints(target, biz):
    app = make_app(target)
    ran: list = []
    lock = threading.Lock()

    @app.task(shared=False)
    def receipt(key):
        with lock:
            ran.append((key, biz.items()))

    engine = sa.create_engine(biz.sqlalchemy_url)
    schema = target.schema if target.engine == "postgresql" else None
    orders = sa.table("orders", sa.column("id"), sa.column("item"), schema=schema)
    try:
        with thread_worker(app):
            with Session(engine) as session, kombu_alkstore.transaction(session):
                session.execute(orders.insert().values(item="sa-commit"))
                receipt.delay("sa-commit")
                with session.begin_nested():  # a savepoint that is kept
                    receipt.delay("sa-nested-kept")
                nested = session.begin_nested()
                receipt.delay("sa-nested-rolled-back")
                nested.rollback()
                time.sleep(0.5)
                assert ran == []
                session.commit()

            with Session(engine) as session, kombu_alkstore.transaction(session):
                session.execute(orders.insert().values(item="sa-rollback"))
                receipt.delay("sa-rollback")
                session.rollback()

            # A Connection on which nothing ran yet: the publish begins its transaction,
            # so its commit() covers the message (and its rollback() drops it).
            with engine.connect() as conn:
                with kombu_alkstore.transaction(conn):
                    receipt.delay("sa-connection-rolled-back")
                conn.rollback()
                with kombu_alkstore.transaction(conn):
                    receipt.delay("sa-connection")
                conn.commit()

            wait_for(lambda: len(ran) >= 3, 15)
            time.sleep(1.5)
    finally:
        engine.dispose()
    assert sorted(key for key, _ in ran) == ["sa-commit", "sa-connection", "sa-nested-kept"]
    assert all(items == ["sa-commit"] for _, items in ran)  # each task saw the order
