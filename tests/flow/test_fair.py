"""Fair share through Celery and the CLI (issue 32, docs/flow-control.md "Fair share"),
on both engines: the limits transport option, ``queue limit --fair/--share/--clear-fair``,
``status``, bad values refused in one line, and a real worker (threads, prefetch 1)
starting a key's tasks while a flood of another key queued before them is waiting.
The store's own contract is tests/store/conformance/test_fair_share.py.
"""

from __future__ import annotations

import json
import threading

import pytest

from kombu_alkstore.errors import ConfigurationError
from tests.helpers import cli, cli_refused, make_app, one_error_line, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)

KEY = "alkstore_limit_key"


def declare(target, publish: int = 0) -> None:
    """The queue ``celery`` declared, with ``publish`` tasks of key ``A`` in it."""
    app = make_app(target)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_declare("celery")

    @app.task(name="t.k", shared=False)
    def k():
        return None

    for _ in range(publish):
        k.apply_async(headers={KEY: "A"})


def test_cli_sets_shows_and_clears_fair_share(target):
    declare(target, publish=2)
    code, out, err = cli(target, "queue", "limit", "celery", "--fair", "--share", "big=3")
    assert code == 0, err
    assert "fair share, shares '*' 1, 'big' 3" in out
    code, out, _ = cli(target, "status")
    assert "fair share (shares '*' 1, 'big' 3)" in out
    code, out, _ = cli(target, "status", "--json")
    assert json.loads(out)[0]["limits"]["fair"] == {"*": 1.0, "big": 3.0}
    code, out, _ = cli(target, "queue", "limit", "celery", "--clear-fair")
    assert code == 0 and "not fair" in out
    with target.open() as store:
        assert store.fair_shares("celery") is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--fair", "--share", "big=0"), "above 0"),
        (("--fair", "--share", "big"), "must read KEY=SHARE"),
        (("--fair", "--share", "=2"), "must read KEY=SHARE"),
        (("--fair", "--clear-fair"), "--fair or --clear-fair"),
        (("--share", "big=2"), "goes with --fair"),
    ],
)
def test_cli_refuses_bad_fair_values_in_one_line(target, argv, says, capsys):
    declare(target)
    err = cli_refused(target, capsys, "queue", "limit", "celery", *argv)
    assert says in err and one_error_line(err)


def test_the_transport_option_makes_a_queue_fair_and_refuses_bad_shares(target):
    limits = {"celery": {"fair": {"big": 3}}, "mail": {"limit": 2, "fair": True}}
    app = make_app(target, transport_options={"limits": limits})
    with app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - connects
    with target.open() as store:
        got = {q.queue: (q.limit, q.fair) for q in store.limits()}
    assert got == {"celery": (None, {"*": 1.0, "big": 3.0}), "mail": (2, {"*": 1.0})}
    bad = make_app(target, transport_options={"limits": {"celery": {"fair": {"big": -1}}}})
    refused = r"limits\['celery'\]\['fair'\]\['big'\]"
    with pytest.raises(ConfigurationError, match=refused), bad.connection_for_write() as conn:
        conn.default_channel  # noqa: B018


def test_a_worker_starts_a_late_key_while_a_flood_waits(target):
    """1,000 tasks of tenant A published before 20 of tenant B, one worker of 2 threads
    at prefetch 1: every B task has started within the first 2 x 20 x 2 = 80 starts
    (the bound: B's share is half of the claims while both have due tasks)."""
    app = make_app(
        target,
        transport_options={"limits": {"celery": {"fair": True}}},
        worker_prefetch_multiplier=1,
        task_acks_late=True,
    )
    starts: list[str] = []
    lock = threading.Lock()

    @app.task(name="t.f", shared=False)
    def f(tenant):
        with lock:
            starts.append(tenant)

    with app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - the option is written: the queue is fair
    for _ in range(1000):
        f.apply_async(("A",), headers={KEY: "A"})
    for _ in range(20):
        f.apply_async(("B",), headers={KEY: "B"})
    with thread_worker(app, concurrency=2):
        wait_for(lambda: starts.count("B") == 20 or len(starts) >= 200, timeout=60)
    first = starts[:80]
    assert first.count("B") == 20, (len(starts), starts.count("B"))
