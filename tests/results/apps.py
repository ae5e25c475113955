"""Apps for the result-backend tests: broker and results both alkstore."""

from __future__ import annotations

import threading
from collections import Counter

from celery import Celery

from tests.helpers import APPS

#: What the in-thread tasks saw, per test (reset by ``result_app``).
CALLS: Counter[str] = Counter()
#: Tasks named "hold" wait for this.
RELEASE = threading.Event()


def result_app(target, backend: str = "alkstore://", **conf) -> Celery:
    """A Celery app on ``target`` with the alkstore result backend (by default in the
    broker's database: ``alkstore://``) and the tasks the tests use."""
    CALLS.clear()
    RELEASE.clear()
    app = Celery("r", broker=target.broker_url, backend=backend, set_as_current=False)
    APPS.append(app)
    options = dict(target.transport_options, polling_interval=1.0)
    options.update(conf.pop("transport_options", {}))
    app.conf.update(
        broker_transport_options=options,
        result_backend_transport_options=conf.pop("backend_options", {}),
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        **conf,
    )

    @app.task(name="r.add", shared=False)
    def add(x, y):
        return x + y

    @app.task(name="r.total", shared=False)
    def total(values):
        CALLS["total"] += 1
        return sum(values)

    @app.task(name="r.same", shared=False)
    def same(values):
        CALLS["same"] += 1
        return values

    @app.task(name="r.boom", shared=False)
    def boom(message="boom"):
        raise ValueError(message)

    @app.task(name="r.hold", shared=False)
    def hold(x):
        RELEASE.wait(120)
        return x * 2

    @app.task(name="r.on_error", shared=False)
    def on_error(request, exc, traceback):
        CALLS["on_error"] += 1
        CALLS[f"on_error:{type(exc).__name__}"] += 1

    @app.task(name="r.children", bind=True, shared=False)
    def children(self):
        return [add.delay(1, 1).id]

    return app
