"""``delay()`` on a SQLite broker file another connection keeps locked (issue 33).

The store says so in one line (``StoreUnavailable``: the file, the busy timeout, what to
do). kombu's publish retries that error by reconnecting; the retried declaration was
given the channel of the collected connection and raised ``AttributeError: 'NoneType'
object has no attribute 'declared_entities'`` instead (kombu_alkstore/compat/kombu.py).
Here: the user sees the store's line, and a publish is never lost or doubled.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import traceback

import pytest
from celery import Celery
from kombu import Queue
from kombu.exceptions import OperationalError

from kombu_alkstore.errors import StoreUnavailable
from kombu_alkstore.store import open_store

BUSY = 0.2
#: Quick retries: the error comes after 4 attempts of BUSY seconds each.
RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.05, "interval_max": 0.05}


@pytest.fixture
def broker(tmp_path):
    path = str(tmp_path / "broker.db")
    app = Celery("locked", broker=f"alkstore+sqlite:///{path}", set_as_current=False)
    app.conf.broker_transport_options = {"busy_timeout": BUSY}
    app.conf.task_publish_retry_policy = RETRY

    @app.task(name="locked.add")
    def add(x, y):
        return x + y

    with app.connection_for_write() as conn:
        conn.default_channel.queue_declare("celery")  # the file and its tables exist
    yield path, app, add
    app.close()


def _locked(path: str) -> sqlite3.Connection:
    """Another connection in a write transaction on ``path``, not committed."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE IF NOT EXISTS other_app (x)")
    holder.execute("INSERT INTO other_app VALUES (1)")
    return holder


def _pending(path: str) -> int:
    store = open_store(f"sqlite:///{path}")
    try:
        return store.size("celery")
    finally:
        store.close()


def test_delay_on_a_locked_file_says_it_is_locked_and_what_to_do(broker):
    path, app, add = broker
    holder = _locked(path)
    try:
        with pytest.raises(OperationalError) as caught:
            add.delay(1, 2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The last line of the traceback the user sees, whole.
    (line,) = traceback.format_exception_only(type(caught.value), caught.value)
    assert line == (
        f"kombu.exceptions.OperationalError: the broker's SQLite file {path} stayed locked for "
        f"busy_timeout={BUSY:g} s: another connection holds a write transaction on it. "
        "If it is your own (a Django or SQLAlchemy transaction on this file), publish "
        "inside it: kombu_alkstore.django.atomic() or kombu_alkstore.transaction(conn)\n"
    )
    assert isinstance(caught.value.__cause__, StoreUnavailable)
    assert _pending(path) == 0  # nothing half-published
    add.delay(1, 2)  # the lock gone, the same app publishes again, once
    assert _pending(path) == 1


def test_a_lock_released_while_kombu_retries_publishes_once(broker):
    path, app, add = broker
    holder = _locked(path)

    def release() -> None:
        time.sleep(BUSY * 2.5)  # after the first attempt, before the retries run out
        holder.execute("COMMIT")
        holder.close()

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        add.delay(1, 2)
    finally:
        releaser.join()
    assert _pending(path) == 1


def test_a_connection_error_during_the_declaration_is_retried(broker, monkeypatch):
    """The same retry path without a lock: a reconnect saves the publish."""
    from kombu_alkstore.store.sqlite.store import SQLiteStore

    path, app, add = broker
    declare, failed = SQLiteStore.queue_declare, []

    def once(self, *args, **kwargs):
        if not failed:
            failed.append(1)
            raise StoreUnavailable("lost for a moment")
        return declare(self, *args, **kwargs)

    monkeypatch.setattr(SQLiteStore, "queue_declare", once)
    with app.producer_or_acquire() as producer:
        producer.publish(
            {"x": 1},
            exchange="",
            routing_key="fresh",
            declare=[Queue("fresh")],
            retry=True,
            retry_policy=RETRY,
        )
    assert failed
    store = open_store(f"sqlite:///{path}")
    try:
        assert store.size("fresh") == 1
    finally:
        store.close()
