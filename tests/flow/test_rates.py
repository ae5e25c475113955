"""Rate limits through Celery, the CLI and the dashboard (issue 32, docs/flow-control.md
"Rate limits"), on both engines: the limits transport option, ``queue limit --rate``,
``status`` (text and JSON), the dashboard and /metrics, bad values refused in one line,
and a worker woken when a window frees. The store's own contract is
tests/store/conformance/test_rate_limits.py; real worker processes,
tests/flow/test_rate_limits_processes.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store.rates import Rate
from tests.helpers import (
    cli,
    cli_refused,
    dashboard_pages,
    make_app,
    one_error_line,
    thread_worker,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

KEY = "alkstore_limit_key"


def publish(target, count: int, key=lambda n: f"key-{n % 2}"):
    app = make_app(target)

    @app.task(name="t.k", shared=False)
    def k():
        return None

    for n in range(count):
        k.apply_async(headers={KEY: key(n)})
    return app


def test_cli_sets_shows_and_clears_rates(target):
    publish(target, 4)
    # A minute's window: the status runs below see the claims still within it (a
    # second's window passed between two CLI runs on a busy machine).
    code, out, err = cli(target, "queue", "limit", "celery", "--rate", "10/m")
    assert code == 0, err
    assert out.splitlines()[0] == "queue 'celery': at most 10 claims per 60 s"
    code, out, _ = cli(target, "queue", "limit", "celery", "--rate", "1/m", "--key", "*")
    assert code == 0 and "each key at most 1/m (busiest 0)" in out
    with target.open() as store:
        assert len(store.claim(["celery"], 10)) == 2  # one per key
    code, out, _ = cli(target, "status")
    assert code == 0 and "RATE" in out and "2/10 per 60s" in out
    assert "each key at most 1/m (busiest 1)" in out and "throttled until" in out
    code, out, _ = cli(target, "status", "--json")
    rates = json.loads(out)[0]["limits"]["rates"]
    assert rates["rate"] == "10/m" and rates["used"] == 2
    assert rates["keys"] == {"*": "1/m"} and rates["keys_used"] == {"*": 1}
    assert rates["throttled_until"] > time.time() and rates["throttles"] == 1
    code, out, _ = cli(target, "queue", "limit", "celery", "--clear-rate", "--key", "*")
    assert code == 0 and out.splitlines()[0] == "queue 'celery' key '*': no rate"
    code, out, _ = cli(target, "queue", "limit", "celery", "3", "--clear-rate")
    assert code == 0 and "at most 3 claimed at once" in out and "no rate" in out
    code, out, _ = cli(target, "status", "--json")
    assert json.loads(out)[0]["limits"]["rates"] is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--rate", "0/s"), "from 1 to"),
        (("--rate", "10"), "must read N/s"),
        (("--rate", "10/fortnight"), "must read N/s"),
        (("--rate", "5/0s"), "the period must be"),
        (("--rate", "1/s", "--clear-rate"), "--rate R or --clear-rate"),
        (("--rate", "1/s", "--key", ""), "1 to 512 characters"),
    ],
)
def test_cli_refuses_bad_rates_in_one_line(target, argv, says, capsys):
    app = make_app(target)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_declare("celery")
    err = cli_refused(target, capsys, "queue", "limit", "celery", *argv)
    assert says in err and one_error_line(err)


def test_the_transport_option_sets_rates_and_refuses_bad_ones_by_name(target):
    limits = {"celery": {"rate": "100/m"}, "mail": {"limit": 3, "key_rates": {"*": "2/s"}}}
    app = make_app(target, transport_options={"limits": limits})
    with app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - connects
    with target.open() as store:
        got = {q.queue: (q.limit, q.rates.rate, q.rates.keys) for q in store.limits()}
    assert got == {
        "celery": (None, Rate(100, 60.0), {}),
        "mail": (3, None, {"*": Rate(2, 1.0)}),
    }
    bad = make_app(target, transport_options={"limits": {"celery": {"rate": "lots"}}})
    match = r"transport option limits\['celery'\]\['rate'\]"
    with pytest.raises(ConfigurationError, match=match), bad.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - connects


def test_a_throttled_worker_is_woken_when_its_window_frees(target):
    """A thread worker on a queue at 2 claims per 0.5 s, its safety poll 30 s away: the
    six tasks run in three windows (two each), each window's claims within the rate."""
    opts = dict(target.transport_options, polling_interval=30.0)
    app = make_app(target, transport_options=opts, task_acks_late=True)
    started: list[float] = []
    lock = threading.Lock()

    @app.task(name="t.r", shared=False)
    def r():
        with lock:
            started.append(time.time())

    with target.open() as store:
        store.set_rate("celery", "2/0.5s")
        store.set_rate("celery", "1000/h", key="unused-key")  # the log keeps every claim
        with thread_worker(app, concurrency=4):
            time.sleep(0.3)
            for _ in range(6):
                r.delay()
            wait_for(lambda: len(started) == 6, 20, interval=0.02)
        logged = store.claims_logged("celery")
    assert len(logged) == 6
    gaps = [b - a for a, b in zip(logged[:-2], logged[2:], strict=True)]
    assert min(gaps) >= 0.5  # the (i + 2)-th claim is 0.5 s after the i-th, at least


def test_the_dashboard_and_metrics_show_rates(target):
    publish(target, 3)
    with target.open() as store:
        store.set_rate("celery", "5/m")
        store.set_rate("celery", "1/h", key="key-1")
        store.claim(["celery"], 3)
        overview, page, metrics = dashboard_pages(store, target, "/", "/queues/celery", "/metrics")
    assert "rate 3/5/m" in overview
    assert 'id="rates"' in page and "3 claims within the last 60 s of 5 allowed" in page
    assert "<code>key-1</code>: 1 of 1/h" in page
    assert 'alkstore_queue_rate_limit{key="",queue="celery"} 5.0' in metrics
    assert 'alkstore_queue_rate_period_seconds{key="key-1",queue="celery"} 3600.0' in metrics
    assert 'alkstore_queue_rate_used{key="",queue="celery"} 3.0' in metrics
    assert 'alkstore_queue_throttled{queue="celery"} 0.0' in metrics
    assert 'alkstore_queue_rate_throttled_total{queue="celery"} 0.0' in metrics


def test_a_throttled_worker_does_not_claim_in_a_loop(target, monkeypatch):
    """A thread worker on a queue at 1 claim per 2 s with jobs waiting: between its
    first claim and the window's end it makes a few claims (on SQLite every commit to
    the file wakes it: 8 seen), not one every few milliseconds (without rate_wait, which
    has_due, next_due and SQLite's pre-claim probe read: 522 in 1.2 s on SQLite)."""
    from kombu_alkstore.transport.scheduling import ClaimScheduler

    claims = [0]
    for name in ("request_claim", "claim_now"):
        original = getattr(ClaimScheduler, name)

        def counted(self, *a, _original=original, **kw):
            claims[0] += 1
            return _original(self, *a, **kw)

        monkeypatch.setattr(ClaimScheduler, name, counted)
    app = make_app(target, task_acks_late=True)
    started: list[float] = []

    @app.task(name="t.s", shared=False)
    def s():
        started.append(time.time())

    with target.open() as store:
        store.set_rate("celery", "1/2s")
        with thread_worker(app, concurrency=2):
            time.sleep(0.3)
            for _ in range(3):
                s.delay()
            wait_for(lambda: len(started) == 1, 20, interval=0.01)
            before = claims[0]
            time.sleep(1.2)
            during = claims[0] - before
            wait_for(lambda: len(started) == 2, 20, interval=0.01)
    assert during <= 25, f"{during} claims while the queue was throttled"
    assert started[1] - started[0] >= 2.0 - 0.1
