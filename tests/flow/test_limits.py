"""Global concurrency limits through Celery and the CLI (issue 32, docs/flow-control.md),
on both engines: the limit key from ``apply_async`` (header or option) and from the task
decorator, hand-off never passing a limit, ``queue limit`` and ``status``, bad values.
The store's own contract is tests/store/conformance/test_concurrency_limits.py; real worker
processes, tests/flow/test_limits_processes.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store.limits import limit_key_of
from tests.helpers import cli, cli_refused, dashboard_pages, make_app, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)

KEY = "alkstore_limit_key"


def test_the_key_comes_from_the_header_the_option_or_the_task_default(target):
    app = make_app(target)

    @app.task(name="t.plain", shared=False)
    def plain(i):
        return i

    @app.task(name="t.tenant", shared=False, alkstore_limit_key=lambda a, kw: f"tenant:{a[0]}")
    def tenant(t):
        return t

    @app.task(name="t.fixed", shared=False, alkstore_limit_key="partner-api")
    def fixed():
        return None

    plain.apply_async((1,), headers={KEY: "by-header"})
    plain.apply_async((2,), alkstore_limit_key="by-option")
    plain.apply_async((3,))
    tenant.delay(7)
    tenant.apply_async((8,), headers={KEY: None})  # the call's header wins: no key
    fixed.delay()
    with target.open() as store:
        keys = [limit_key_of(j.body) for j in store.peek("celery", 10)]
    assert keys == ["by-header", "by-option", None, "tenant:7", None, "partner-api"]


def test_a_per_key_limit_through_celery(target):
    app = make_app(target, task_acks_late=True)
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    lock = threading.Lock()

    @app.task(name="t.work", shared=False, alkstore_limit_key=lambda a, kw: a[0])
    def work(tenant, n):
        with lock:
            running[tenant] = running.get(tenant, 0) + 1
            peak[tenant] = max(peak.get(tenant, 0), running[tenant])
        time.sleep(0.02)
        with lock:
            running[tenant] -= 1

    with target.open() as store:
        store.set_limit("celery", 1, key="*")
        for n in range(12):
            work.delay("a" if n < 8 else "b", n)
        with thread_worker(app, concurrency=6):
            wait_for(lambda: not store.counts(["celery"])[0].pending, 60)
            wait_for(lambda: store.counts(["celery"])[0].processing == 0, 60)
    assert peak == {"a": 1, "b": 1}


def test_an_idle_worker_is_never_handed_more_than_the_limit(target):
    """PostgreSQL hands a publish to an idle worker's offer without a claim; a queue with
    a limit is never handed off, so one task at a time runs however idle the worker."""
    app = make_app(target, task_acks_late=True)
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    @app.task(name="t.slow", shared=False)
    def slow():
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1

    with target.open() as store, thread_worker(app, concurrency=4):
        store.set_limit("celery", 1)
        time.sleep(0.5)  # the worker idle, its offers made
        for _ in range(6):
            slow.delay()
            time.sleep(0.03)
        wait_for(lambda: sum(c.pending + c.processing for c in store.counts(["celery"])) == 0, 60)
    assert state["peak"] == 1


def test_cli_sets_shows_and_clears_limits(target):
    app = make_app(target)

    @app.task(name="t.k", shared=False)
    def k():
        return None

    for n in range(3):
        k.apply_async(headers={KEY: f"key-{n % 2}"})
    with target.open() as store:
        store.claim(["celery"], 3)
    assert cli(target, "queue", "limit", "celery", "8")[0] == 0
    code, out, _ = cli(target, "queue", "limit", "celery", "2", "--key", "key-0")
    assert code == 0 and "key 'key-0' 2/2" in out and "claimed 3/8" in out
    code, out, _ = cli(target, "status")
    assert code == 0 and "LIMIT" in out and "3/8" in out and "key 'key-0' 2/2" in out
    code, out, _ = cli(target, "status", "--json")
    [row] = json.loads(out)
    assert row["limits"] == {
        "queue": "celery",
        "limit": 8,
        "used": 3,
        "keys": {"key-0": 2},
        "keys_used": {"key-0": 2, "key-1": 1},
        "rates": None,
        "fair": None,
    }
    assert cli(target, "queue", "limit", "celery", "--clear", "--key", "key-0")[0] == 0
    code, out, _ = cli(target, "queue", "limit", "celery", "--clear")
    assert code == 0 and "no limit" in out
    code, out, _ = cli(target, "status", "--json")
    assert json.loads(out)[0]["limits"] is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("queue", "limit", "celery", "-1"), "integer >= 0"),
        (("queue", "limit", "celery", "2.5"), "integer >= 0"),
        (("queue", "limit", "celery", "ten"), "integer >= 0"),
        (("queue", "limit", "no-such-queue", "3"), "no queue 'no-such-queue'"),
        (("queue", "limit", "celery"), "give the limit N, or --clear"),
        (("queue", "limit", "celery", "3", "--clear"), "give the limit N, or --clear"),
    ],
)
def test_cli_refuses_bad_values_in_one_line(target, argv, says, capsys):
    app = make_app(target)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_declare("celery")
    assert says in cli_refused(target, capsys, *argv)


def test_the_transport_option_sets_the_limits_when_a_connection_opens(target):
    """``broker_transport_options={"limits": ...}``: the limits are on the store once a
    connection carrying them has opened it, queue-wide and per key."""
    limits = {"celery": 2, "mail": {"limit": 3, "keys": {"t1": 1, "*": 2}}}
    app = make_app(target, transport_options={"limits": limits})
    with app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - connects
    with target.open() as store:
        got = {q.queue: (q.limit, q.keys) for q in store.limits()}
    assert got == {"celery": (2, {}), "mail": (3, {"t1": 1, "*": 2})}


def test_the_transport_option_refuses_a_bad_limit_by_name(target):
    app = make_app(target, transport_options={"limits": {"celery": -1}})
    match = r"transport option limits\['celery'\]"
    with pytest.raises(ConfigurationError, match=match), app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - connects


def test_the_dashboard_and_metrics_show_limits(target):
    app = make_app(target)

    @app.task(name="t.d", shared=False)
    def d():
        return None

    for n in range(3):
        d.apply_async(headers={KEY: f"t{n % 2}"})
    with target.open() as store:
        store.claim(["celery"], 2)
        store.set_limit("celery", 5)
        store.set_limit("celery", 1, key="t1")
        overview, page, metrics = dashboard_pages(store, target, "/", "/queues/celery", "/metrics")
    assert "limit 2/5" in overview
    assert 'id="limits"' in page and "2 claimed of 5" in page and "<code>t1</code>: 1 of 1" in page
    assert 'alkstore_queue_limit{key="",queue="celery"} 5.0' in metrics
    assert 'alkstore_queue_limit_used{key="",queue="celery"} 2.0' in metrics
    assert 'alkstore_queue_limit{key="t1",queue="celery"} 1.0' in metrics


def test_a_retry_keeps_its_limit_key(target):
    """``self.retry()`` publishes a new message: it carries the key of the call (Celery
    copies the request's headers into the retry) and of the task default."""
    app = make_app(target)

    @app.task(name="t.again", shared=False, bind=True, max_retries=1)
    def again(self, n):
        if not self.request.retries:
            raise self.retry(countdown=30)

    @app.task(
        name="t.again_default",
        shared=False,
        bind=True,
        max_retries=1,
        alkstore_limit_key=lambda a, kw: f"d{a[0]}",
    )
    def again_default(self, n):
        if not self.request.retries:
            raise self.retry(countdown=30)

    again.apply_async((1,), headers={KEY: "per-call"})
    again_default.delay(2)
    with target.open() as store, thread_worker(app, concurrency=2):
        wait_for(lambda: len(store.scheduled("celery")) == 2, 30)
        keys = sorted(limit_key_of(j.body) or "-" for j in store.scheduled("celery"))
    assert keys == ["d2", "per-call"]
