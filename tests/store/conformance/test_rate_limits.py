"""Rate limits at the store (issue 32, docs/flow-control.md "Rate limits"), on every engine.

A queue's rate caps its claims in any period (at most N claims in any (s, s + P] by the
database's clock); a per-key rate caps those of one key (or, with "*", of every key).
An ack frees nothing (a rate counts claims, not claims held); a spent job buried by the
claim takes no slot; a delayed job is not made early. A throttled queue says so to the
due checks: has_due is False and next_due is the time its window frees.
"""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store.rate_values import max_in_window
from kombu_alkstore.store.rates import Rate, parse_rate, parse_rates
from tests.store.conformance.helpers import fill
from tests.store.conformance.helpers import keyed_body as body


def test_a_queue_rate_caps_claims_per_period_and_acks_free_nothing(store):
    fill(store, "q", 10)
    store.set_rate("q", "3/0.6s")
    got = store.claim(["q"], limit=10)
    assert len(got) == 3
    store.ack(got)  # a rate counts claims: acking them frees no room
    assert store.claim(["q"], limit=10) == []
    [use] = store.limits()
    assert use.rates is not None and (use.rates.rate, use.rates.used) == (Rate(3, 0.6), 3)
    assert use.limit is None
    time.sleep(0.7)
    assert len(store.claim(["q"], limit=10)) == 3


def test_a_queue_without_a_rate_is_not_limited(store):
    fill(store, "free", 5)
    fill(store, "rated", 5)
    store.set_rate("rated", "1/m")
    assert len(store.claim(["free"], limit=10)) == 5
    got = store.claim(["rated", "free"], limit=10)
    assert [d.queue for d in got] == ["rated"]
    assert store.claim(["rated", "free"], limit=10) == []


def test_per_key_rates_and_every_other_key(store):
    fill(store, "q", 4, key="big")
    fill(store, "q", 4, key="small")
    fill(store, "q", 4, key="other")
    fill(store, "q", 3)  # no key: only a queue-wide rate would count them
    store.set_rate("q", "3/m", key="big")
    store.set_rate("q", "1/m", key="*")
    got = store.claim(["q"], limit=50)
    by: dict[str | None, int] = {}
    for d in got:
        key = json.loads(d.body)["headers"].get("alkstore_limit_key")
        by[key] = by.get(key, 0) + 1
    assert by == {"big": 3, "small": 1, "other": 1, None: 3}
    assert store.claim(["q"], limit=50) == []
    [use] = store.limits()
    assert use.rates is not None
    assert use.rates.keys == {"big": Rate(3, 60.0), "*": Rate(1, 60.0)}
    assert use.rates.keys_used == {"big": 3, "*": 1}


def test_a_rate_and_a_concurrency_limit_together(store):
    fill(store, "q", 10)
    store.set_rate("q", "4/m")
    store.set_limit("q", 2)
    first = store.claim(["q"], limit=10)
    assert len(first) == 2  # the concurrency limit binds first
    store.ack(first)
    assert len(store.claim(["q"], limit=10)) == 2  # then the rate: 4 in the minute
    store.ack(store.claim(["q"], limit=10))
    assert store.claim(["q"], limit=10) == []


def test_a_rate_changed_at_run_time_applies_at_the_next_claim(store):
    fill(store, "q", 10)
    store.set_rate("q", "2/m")
    assert len(store.claim(["q"], limit=10)) == 2
    assert store.claim(["q"], limit=10) == []
    store.set_rate("q", "5/m")  # the 2 claims logged count against it
    assert len(store.claim(["q"], limit=10)) == 3
    assert store.clear_rate("q")
    assert len(store.claim(["q"], limit=10)) == 5
    assert store.limits() == []
    assert not store.clear_rate("never-declared")


def test_spent_jobs_are_buried_without_taking_a_slot(store):
    for n in range(3):
        store.enqueue("q", body(n=n), max_attempts=1, visibility_timeout=0.2)
    store.set_rate("q", "3/m")
    assert len(store.claim(["q"], limit=1)) == 1
    time.sleep(0.3)  # lapsed, no attempt left: buried by the next claim
    got = store.claim(["q"], limit=5)
    assert len(got) == 2
    assert store.limits()[0].rates.used == 3


def test_a_delayed_job_is_not_made_early_and_throttling_tells_the_due_checks(store):
    store.set_rate("q", "1/1s")
    store.enqueue("q", body(n=1))
    second = store.enqueue("q", body(n=2))
    later = store.enqueue("q", body(n=3), delay=0.5)
    now = store.now()
    assert len(store.claim(["q"], limit=5)) == 1
    assert store.claim(["q"], limit=5) == []  # the second is refused by the rate
    assert store.limits()[0].rates.throttles == 1
    # throttled: nothing due for a claim; the delayed job keeps its own time (not later)
    assert store.has_due(["q"]) is False
    due = store.next_due(["q"])
    assert due is not None and now + 0.4 < due <= now + 0.7
    time.sleep(max(due - store.now(), 0) + 0.05)
    assert store.claim(["q"], limit=5) == []  # due, but the window is not free yet
    # the window frees at the first claim + 1 s: next_due says so
    free = store.next_due(["q"])
    assert free is not None and now + 0.8 < free <= now + 1.3
    assert store.has_due(["q"]) is False
    time.sleep(max(free - store.now(), 0) + 0.05)
    assert store.has_due(["q"]) is True
    assert [d.id for d in store.claim(["q"], limit=5)] == [second]  # waited longest
    assert store.claim(["q"], limit=5) == []
    time.sleep(1.05)
    assert [d.id for d in store.claim(["q"], limit=5)] == [later]
    assert store.next_due(["q"]) is None


@pytest.mark.parametrize(
    "bad",
    ["0/s", "-1/s", "10", "10/x", "ten/s", "10/0s", "10/9999999s", 10, None, "1.5/s"],
)
def test_bad_rates_are_refused_in_one_line(store, bad):
    with pytest.raises(ConfigurationError) as err:
        store.set_rate("q", bad)
    assert "\n" not in str(err.value)


def test_the_rate_spellings_and_the_transport_option():
    assert parse_rate("10/s") == Rate(10, 1.0)
    assert parse_rate("100/m") == Rate(100, 60.0)
    assert parse_rate("1000/h") == Rate(1000, 3600.0)
    assert parse_rate("5/30s") == Rate(5, 30.0)
    assert parse_rate(" 2 / 0.5s ") == Rate(2, 0.5)
    assert str(Rate(10, 1.0)) == "10/s" and str(Rate(5, 30.0)) == "5/30s"
    parsed = parse_rates(
        {"a": 8, "b": {"limit": 2, "rate": "10/s", "key_rates": {"*": "1/m", "k": "2/h"}}}
    )
    assert parsed == {"b": {None: Rate(10, 1.0), "*": Rate(1, 60.0), "k": Rate(2, 3600.0)}}
    with pytest.raises(ConfigurationError, match=r"limits\['b'\]\['rate'\]"):
        parse_rates({"b": {"rate": "fast"}})
    with pytest.raises(ConfigurationError, match="key_rates"):
        parse_rates({"b": {"key_rates": {"": "1/s"}}})


def _claimer(url: str, schema: str | None, queue: str, go, out) -> None:
    """A claimer process: once ``go`` is set, claim for 3 s, each claim's time as it
    returned (this machine's clock) into ``out``."""
    from kombu_alkstore.store import open_store

    store = open_store(url, schema=schema)
    seen = []
    out.put("ready")
    go.wait(60)
    until = time.time() + 3.0
    try:
        while time.time() < until:
            got = store.claim([queue], limit=2)
            if got:
                seen.extend([time.time()] * len(got))
                store.ack(got)
            else:
                time.sleep(0.002)
    finally:
        store.close()
    out.put(seen)


def test_claimers_in_several_processes_never_exceed_the_rate(target, opener):
    """Six processes, each its own store, race for a queue limited to 5 claims per 0.5 s
    for 3 s. Every claim's logged time (claim_log, the database's clock) is read back:
    no interval (s, s + 0.5] holds more than 5, and the claims returned to the processes
    agree within their round trip (0.1 s)."""
    setup = opener()
    fill(setup, "race", 400)
    setup.set_rate("race", "5/0.5s")
    # a rate of a key no job has, with a long period: the log keeps every claim
    setup.set_rate("race", "1000000/h", key="unused-key")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=_claimer, args=(target.url, target.schema, "race", go, out))
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    assert [out.get(timeout=60) for _ in procs] == ["ready"] * 6
    go.set()
    seen: list[float] = []
    for _ in procs:
        seen.extend(out.get(timeout=60))
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    logged = setup.claims_logged("race")
    assert len(logged) == len(seen)
    assert 20 <= len(logged) <= 5 * (3.0 / 0.5 + 1)
    assert max_in_window(logged, 0.5) <= 5
    assert max_in_window(seen, 0.5 - 0.1) <= 5
