"""pytest plugin (entry point ``pytest11: alkstore``): run tasks through the real transport.

Installed with the package and loaded by pytest automatically. Its fixtures:

``alkstore_broker_url``
    ``alkstore+sqlite:///<tmp>/alkstore-broker.db``, a fresh file per test.
``alkstore_config``
    The Celery settings the app gets (broker, ``rpc://`` results, no root-logger
    hijack). Override it to add your own settings.
``alkstore_app``
    A Celery app configured from ``alkstore_config``. Register tasks on it, or override
    the fixture to point your own app at the broker with :func:`configured`.
``alkstore_worker_parameters``
    Keyword arguments for :func:`celery.contrib.testing.worker.start_worker`
    (default: the threads pool, concurrency 2). Override to change them.
``alkstore_worker``
    A real Celery worker consuming from ``alkstore_app``, started in a thread for the
    test and stopped after it.

Example (``tests/test_tasks.py`` of your project)::

    def test_add(alkstore_app, alkstore_worker):
        @alkstore_app.task
        def add(x, y):
            return x + y
        ...

    # or, to run your own app's tasks:
    import pytest
    from kombu_alkstore.contrib.pytest_plugin import configured
    from proj.celery import app as proj_app

    @pytest.fixture
    def alkstore_app(alkstore_config):
        with configured(proj_app, alkstore_config) as app:
            yield app

This module is imported by every pytest run where the package is installed: it must
stay cheap and free of side effects (Celery and kombu are imported inside the fixtures).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_MISSING = object()


@contextmanager
def configured(app: Any, config: dict[str, Any]) -> Iterator[Any]:
    """Point an existing Celery ``app`` at ``config`` (e.g. the alkstore broker) for a while.

    The app's broker connection pool is closed before and after, so the new broker URL
    takes effect and the old settings come back afterwards.
    """
    import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)

    saved = {key: app.conf.get(key, _MISSING) for key in config}
    _reset(app)
    app.conf.update(config)
    try:
        yield app
    finally:
        _reset(app)
        for key, value in saved.items():
            if value is _MISSING:
                app.conf.pop(key, None)
            else:
                app.conf[key] = value


def _reset(app: Any) -> None:
    """Drop what the app built from its settings: the broker connection and producer pools
    and the cached result backend, so the next use reads the current settings."""
    import contextlib
    import threading

    pool, app._pool = app._pool, None
    if pool is not None:
        with contextlib.suppress(Exception):  # a broken connection needs no closing
            pool.force_close_all()
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    app._local = threading.local()
    if hasattr(app, "_backend_cache"):  # Celery >= 5.5 caches thread-safe backends here
        app._backend_cache = None


@pytest.fixture
def alkstore_broker_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A broker URL on a fresh temporary SQLite file."""
    path = tmp_path_factory.mktemp("alkstore") / "alkstore-broker.db"
    return f"alkstore+sqlite:///{path}"


@pytest.fixture
def alkstore_config(alkstore_broker_url: str) -> dict[str, Any]:
    """Celery settings for tests on the alkstore broker; override to add your own."""
    return {
        "broker_url": alkstore_broker_url,
        "result_backend": "rpc://",
        "broker_transport_options": {},
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        "task_always_eager": False,
    }


@pytest.fixture
def alkstore_app(alkstore_config: dict[str, Any]) -> Iterator[Any]:
    """A Celery app on the alkstore broker (closed after the test)."""
    from celery import Celery

    import kombu_alkstore  # noqa: F401  (registers the alkstore+ URL scheme)

    app = Celery("alkstore_test", set_as_current=False)
    app.conf.update(alkstore_config)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def alkstore_worker_parameters() -> dict[str, Any]:
    """Arguments for ``start_worker``; override to change the pool or concurrency."""
    return {
        "pool": "threads",
        "concurrency": 2,
        "perform_ping_check": False,
        "loglevel": "WARNING",
        "shutdown_timeout": 30.0,
    }


@pytest.fixture
def alkstore_worker(alkstore_app: Any, alkstore_worker_parameters: dict[str, Any]) -> Iterator[Any]:
    """A real Celery worker for ``alkstore_app``, running in a thread during the test.

    Tasks must be registered on the app before the worker starts: define them in a module
    the app imports, or request ``alkstore_app`` in a fixture that registers them and
    list that fixture before ``alkstore_worker``.
    """
    from celery.contrib.testing.worker import start_worker

    from kombu_alkstore.compat.celery import release_event_loop

    try:
        with start_worker(alkstore_app, **alkstore_worker_parameters) as worker:
            yield worker
    finally:
        release_event_loop()  # the next test's worker builds its own loop and timer
