"""Fair share between the keys of a queue (issue 32, docs/flow-control.md "Fair
share"), on every engine.

A fair queue's claims take from its keys in turn, weighted by their shares, instead of
by due time alone: a flood of one key queued first does not starve a key queued after
it. Concurrency and rate limits still hold beside it; a queue that is not fair keeps
claim order.
"""

from __future__ import annotations

import json

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob
from kombu_alkstore.store.fair import parse_fair
from tests.store.conformance.helpers import keyed_body

#: The flood queued first, and the few queued after it.
FLOOD, FEW = 3000, 100


def _queue(store, queue: str, key: str | None, count: int, start: int = 0) -> None:
    """``count`` jobs of ``key`` in ``queue``, enqueued in batches (one run_at each)."""
    for at in range(0, count, 500):
        store.enqueue_many(
            [NewJob(queue, keyed_body(key, start + n)) for n in range(at, min(at + 500, count))]
        )


def _key_of(delivery) -> str | None:
    return json.loads(delivery.body)["headers"].get("alkstore_limit_key")


def _drain(store, queue: str, claims: int, batch: int = 10) -> list[list[str | None]]:
    """The keys of each of ``claims`` claims of ``batch``, acked at once."""
    taken = []
    for _ in range(claims):
        got = store.claim([queue], batch)
        taken.append([_key_of(d) for d in got])
        store.ack(got)
    return taken


def test_a_flood_of_one_key_does_not_starve_a_key_queued_after_it(store):
    """3,000 jobs of A, then 100 of B, equal shares, claims of 10: every B job is taken
    within the first 2 x 100 / 10 = 20 claims (the bound: B's share of each claim is
    half of it), and the claims take A and B in turn."""
    _queue(store, "q", "A", FLOOD)
    _queue(store, "q", "B", FEW, start=FLOOD)
    store.set_fair("q")
    taken = _drain(store, "q", 20)
    flat = [k for claim in taken for k in claim]
    assert flat.count("B") == FEW
    assert taken[0].count("B") == 5 and taken[0].count("A") == 5
    # the next claims are A alone: B is done
    assert _drain(store, "q", 1) == [["A"] * 10]


def test_one_job_per_claim_alternates_between_keys(store):
    """With claims of one (a worker at prefetch 1) the keys alternate: the fairness is
    kept across claims (the passes), not only within one."""
    _queue(store, "q", "A", 200)
    _queue(store, "q", "B", 20, start=200)
    store.set_fair("q")
    keys = [k for claim in _drain(store, "q", 40, batch=1) for k in claim]
    assert keys.count("B") == 20
    assert all(keys[i] != keys[i + 1] for i in range(0, 38, 2))


def test_shares_weight_the_keys(store):
    """Shares 3:1: over 40 claims of 4, about three A jobs for each B job."""
    _queue(store, "q", "A", 400)
    _queue(store, "q", "B", 400, start=400)
    store.set_fair("q", {"*": 1, "A": 3})
    flat = [k for claim in _drain(store, "q", 40, batch=4) for k in claim]
    assert len(flat) == 160
    assert 115 <= flat.count("A") <= 125 and 35 <= flat.count("B") <= 45
    # one claim at a time too
    keys = [k for claim in _drain(store, "q", 40, batch=1) for k in claim]
    assert 28 <= keys.count("A") <= 32


def test_jobs_without_a_key_are_one_group(store):
    _queue(store, "q", "A", 100)
    _queue(store, "q", None, 100, start=100)
    store.set_fair("q")
    flat = [k for claim in _drain(store, "q", 4, batch=10) for k in claim]
    assert flat.count(None) == 20 and flat.count("A") == 20


def test_an_idle_key_gets_no_credit(store):
    """A key that had nothing due while others were claimed rejoins at the queue's
    virtual time: it does not take every claim for its idle time."""
    _queue(store, "q", "A", 300)
    store.set_fair("q")
    _drain(store, "q", 10)
    _queue(store, "q", "B", 100, start=300)
    taken = _drain(store, "q", 2)
    assert [c.count("B") for c in taken] == [5, 5]


def test_fair_share_within_concurrency_and_per_key_limits(store):
    """A per-key limit of 2 and a queue limit of 5: a claim never holds more than the
    limits, and B still gets its turns while A floods."""
    _queue(store, "q", "A", 500)
    _queue(store, "q", "B", 50, start=500)
    store.set_fair("q")
    store.set_limit("q", 5)
    store.set_limit("q", 3, key="A")
    first = store.claim(["q"], 10)
    keys = [_key_of(d) for d in first]
    assert len(first) == 5 and keys.count("A") == 3 and keys.count("B") == 2
    assert store.claim(["q"], 10) == []
    store.ack(first)
    [use] = store.limits()
    assert use.used == 0


def test_fair_share_within_a_rate(store):
    _queue(store, "q", "A", 200)
    _queue(store, "q", "B", 20, start=200)
    store.set_fair("q")
    store.set_rate("q", "6/m")
    got = store.claim(["q"], 10)
    assert sorted(_key_of(d) for d in got) == ["A"] * 3 + ["B"] * 3
    assert store.claim(["q"], 10) == []
    assert len(store.claims_logged("q")) == 6


def test_a_queue_that_is_not_fair_keeps_claim_order(store):
    _queue(store, "q", "A", 300)
    _queue(store, "q", "B", 10, start=300)
    store.set_limit("q", 1000)
    flat = [k for claim in _drain(store, "q", 30) for k in claim]
    assert flat == ["A"] * 300
    store.set_fair("q")
    store.clear_fair("q")
    assert store.fair_shares("q") is None
    assert [k for c in _drain(store, "q", 1) for k in c] == ["B"] * 10


def test_a_fair_queue_beside_another_limited_queue_in_one_claim(store):
    """In a claim of several queues, a fair queue's picks go by its fair order and
    compete with the other queue's jobs by due time: B is not left out."""
    _queue(store, "f", "A", 100)
    _queue(store, "f", "B", 10, start=100)
    _queue(store, "other", None, 100, start=200)
    store.set_fair("f")
    store.set_limit("other", 1000)
    got = store.claim(["f", "other"], 10)
    assert [d.queue for d in got] == ["f"] * 10
    assert sorted(_key_of(d) for d in got) == ["A"] * 5 + ["B"] * 5
    assert store.fair_shares("f") == {"*": 1.0}


@pytest.mark.parametrize("bad", [{"*": 0}, {"A": -1}, {"A": "x"}, {"": 1}, 7, {"A": float("inf")}])
def test_bad_shares_are_refused_in_one_line(store, bad):
    with pytest.raises(ConfigurationError) as exc:
        store.set_fair("q", bad)
    assert "\n" not in str(exc.value)


def test_the_transport_option():
    assert parse_fair({"q": {"fair": True}, "r": 3, "s": {"limit": 2}}) == {"q": {"*": 1.0}}
    assert parse_fair({"q": {"fair": {"big": 3}}}) == {"q": {"*": 1.0, "big": 3.0}}
    with pytest.raises(ConfigurationError, match=r"limits\['q'\]\['fair'\]"):
        parse_fair({"q": {"fair": "yes"}})
