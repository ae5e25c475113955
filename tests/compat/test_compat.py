"""kombu_alkstore.compat and the PostgreSQL engine's psycopg compat
(kombu_alkstore.store.postgres.compat): each workaround does what it says on every
supported line."""

from __future__ import annotations

import os

import psycopg
from celery import Celery
from celery.exceptions import Reject
from kombu.asynchronous import Hub, get_event_loop, set_event_loop

from kombu_alkstore.compat import celery as compat_celery
from kombu_alkstore.store.postgres.compat import send_query_prepared

PG = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def test_send_query_prepared_takes_tuples():
    """psycopg-binary 3.2 refuses tuples ('Expected list, got tuple'); 3.3 takes both."""
    with psycopg.connect(PG, autocommit=True) as conn:
        pg = conn.pgconn
        assert pg.prepare(b"alk_compat", b"select $1::text || $2::text").status == 1
        send_query_prepared(pg, b"alk_compat", (b"a", b"b"), (0, 0))
        result = pg.get_result()
        while pg.get_result() is not None:
            pass
        assert result.get_value(0, 0) == b"ab"


def test_on_reject_reports_the_reason_of_a_task_run_here():
    app = Celery("compat", set_as_current=False)
    noted: list[tuple[str, str | None]] = []
    compat_celery.on_reject(lambda task_id, why: noted.append((task_id, why)))

    @app.task(shared=False)
    def refuse():
        raise Reject("bad 7", requeue=False)

    @app.task(shared=False)
    def requeue():
        raise Reject("again", requeue=True)

    first = refuse.apply()
    requeue.apply()
    assert noted == [(first.id, "bad 7")]


def test_release_event_loop_forgets_the_current_loop():
    set_event_loop(Hub())
    compat_celery.release_event_loop()
    assert get_event_loop() is None
