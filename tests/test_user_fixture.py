"""The pytest plugin's fixtures, used as a user's own test suite would use them."""

from __future__ import annotations

import time

import pytest
from celery import Celery

from kombu_alkstore.contrib.pytest_plugin import configured

# A user's app, defined at import time with its own (here: unreachable) broker.
user_app = Celery("user_proj", broker="redis://127.0.0.1:1/0", set_as_current=False)


@user_app.task
def multiply(x, y):
    return x * y


@pytest.fixture
def tasks(alkstore_app):
    """Tasks registered on the fixture app before the worker starts."""

    @alkstore_app.task(shared=False)
    def add(x, y):
        return x + y

    @alkstore_app.task(shared=False)
    def stamp():
        return time.time()

    return {"add": add, "stamp": stamp}


def test_broker_url_is_a_temp_sqlite_file(alkstore_broker_url, tmp_path_factory):
    assert alkstore_broker_url.startswith("alkstore+sqlite:///")
    assert alkstore_broker_url.endswith(".db")


def test_task_runs_through_the_real_transport(alkstore_app, tasks, alkstore_worker):
    assert alkstore_app.conf.broker_url.startswith("alkstore+sqlite:///")
    assert alkstore_app.connection_for_write().transport.driver_type == "alkstore"
    assert tasks["add"].delay(2, 3).get(timeout=20) == 5
    results = [tasks["add"].delay(i, i) for i in range(10)]
    assert [r.get(timeout=20) for r in results] == [2 * i for i in range(10)]


def test_countdown_is_honoured(tasks, alkstore_worker):
    sent = time.time()
    ran = tasks["stamp"].apply_async(countdown=1.5).get(timeout=20)
    assert ran - sent >= 1.4


def test_fresh_broker_per_test(alkstore_app, tasks, alkstore_worker):
    # Nothing is left over from the previous tests' brokers.
    from kombu_alkstore.store import open_store

    url = alkstore_app.conf.broker_url.removeprefix("alkstore+")
    store = open_store(url)
    try:
        assert all(c.dead == 0 for c in store.counts())
    finally:
        store.close()


def test_configured_points_a_users_app_at_the_broker(alkstore_config, alkstore_worker_parameters):
    from celery.contrib.testing.worker import start_worker

    with (
        configured(user_app, alkstore_config) as app,
        start_worker(app, **alkstore_worker_parameters),
    ):
        assert multiply.delay(6, 7).get(timeout=20) == 42
    # ...and the user's own settings come back afterwards.
    assert user_app.conf.broker_url == "redis://127.0.0.1:1/0"
    assert user_app.conf.result_backend is None


class TestOverridingTheAppFixture:
    """The documented pattern: override ``alkstore_app`` to run your own app's tasks."""

    @pytest.fixture
    def alkstore_app(self, alkstore_config):
        with configured(user_app, alkstore_config) as app:
            yield app

    def test_users_task_through_worker_fixture(self, alkstore_worker):
        assert multiply.delay(3, 4).get(timeout=20) == 12
