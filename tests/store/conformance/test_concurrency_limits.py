"""Concurrency limits at the store (issue 32, docs/flow-control.md), on every engine.

A queue's limit caps its live claims (processing, deadline ahead); a per-key limit caps
those of one key (or, with "*", of every key). Acks, dead letters and lapses free a slot;
a limit changed at run time applies at the next claim; a queue without one is untouched.
"""

from __future__ import annotations

import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store.limits import limit_key_of, parse_limits
from tests.store.conformance.helpers import fill
from tests.store.conformance.helpers import keyed_body as body


def test_a_queue_limit_caps_live_claims(store):
    fill(store, "q", 10)
    store.set_limit("q", 3)
    got = store.claim(["q"], limit=10)
    assert len(got) == 3
    assert store.claim(["q"], limit=10) == []
    # an ack frees one slot
    store.ack(got[:1])
    again = store.claim(["q"], limit=10)
    assert len(again) == 1
    # a dead letter frees one too
    store.fail(again, "boom")
    assert len(store.claim(["q"], limit=10)) == 1
    [use] = store.limits()
    assert (use.queue, use.limit, use.used) == ("q", 3, 3)


def test_a_queue_without_a_limit_is_not_limited(store):
    fill(store, "free", 5)
    fill(store, "capped", 5)
    store.set_limit("capped", 1)
    assert len(store.claim(["free"], limit=10)) == 5
    got = store.claim(["capped", "free"], limit=10)
    assert [d.queue for d in got] == ["capped"]


def test_several_queues_in_one_claim_each_within_its_limit(store):
    fill(store, "a", 5)
    fill(store, "b", 5)
    fill(store, "c", 5)
    store.set_limit("a", 2)
    store.set_limit("b", 1)
    got = store.claim(["a", "b", "c"], limit=20)
    by = {q: sum(d.queue == q for d in got) for q in "abc"}
    assert by == {"a": 2, "b": 1, "c": 5}


def test_a_lapsed_claim_frees_its_slot_and_is_claimed_again(store):
    store.enqueue("q", body(), visibility_timeout=0.3)
    store.enqueue("q", body(n=1), visibility_timeout=0.3)
    store.set_limit("q", 1)
    [first] = store.claim(["q"], limit=5)
    assert store.claim(["q"], limit=5) == []
    time.sleep(0.45)
    got = store.claim(["q"], limit=5)
    assert len(got) == 1  # the lapsed one or the other, never both
    assert store.limits()[0].used == 1


def test_a_limit_changed_at_run_time_applies_at_the_next_claim(store):
    fill(store, "q", 10)
    store.set_limit("q", 4)
    held = store.claim(["q"], limit=10)
    assert len(held) == 4
    store.set_limit("q", 2)  # lowered: the four run on, no new claim until below 2
    store.ack(held[:2])
    assert store.claim(["q"], limit=10) == []
    store.ack(held[2:3])
    assert len(store.claim(["q"], limit=10)) == 1
    store.set_limit("q", 0)  # 0: no claim at all
    store.ack(store.claim(["q"], limit=10))
    assert store.claim(["q"], limit=10) == []
    assert store.clear_limit("q")
    assert len(store.claim(["q"], limit=10)) == 10 - 5
    assert store.limits() == []


def test_per_key_limits(store):
    fill(store, "t", 6, key="tenant-a")
    fill(store, "t", 6, key="tenant-b")
    fill(store, "t", 2)  # no key: the queue's limit only (none here)
    store.set_limit("t", 2, key="*")
    store.set_limit("t", 1, key="tenant-b")
    got = store.claim(["t"], limit=20)
    keys = sorted(limit_key_of(d.body) or "-" for d in got)
    assert keys == ["-", "-", "tenant-a", "tenant-a", "tenant-b"]
    assert store.claim(["t"], limit=20) == []
    [use] = store.limits()
    assert use.keys == {"*": 2, "tenant-b": 1}
    assert use.keys_used == {"tenant-a": 2, "tenant-b": 1}
    # a queue-wide limit on top: the smaller room wins
    store.clear_limit("t", key="tenant-b")
    store.set_limit("t", 6)
    got = store.claim(["t"], limit=20)
    assert [limit_key_of(d.body) for d in got] == ["tenant-b"]
    assert store.limits()[0].keys == {"*": 2}


def test_spent_lapsed_claims_are_buried_not_counted(store):
    store.enqueue("q", body(), visibility_timeout=0.3, max_attempts=1)
    store.enqueue("q", body(n=1))
    store.set_limit("q", 1)
    assert len(store.claim(["q"], limit=1)) == 1
    time.sleep(0.45)
    got = store.claim(["q"], limit=5)
    assert len(got) == 1 and got[0].attempts == 1
    assert store.counts(["q"])[0].dead == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_limits_are_refused(store, bad):
    with pytest.raises(ConfigurationError, match="limit"):
        store.set_limit("q", bad)


def test_the_transport_option_is_parsed_and_refused_by_name():
    assert parse_limits({"a": 8, "b": {"limit": 4, "keys": {"*": 1, "x": 2}}}) == {
        "a": {None: 8},
        "b": {None: 4, "*": 1, "x": 2},
    }
    with pytest.raises(ConfigurationError, match=r"limits\['a'\]"):
        parse_limits({"a": -2})
    with pytest.raises(ConfigurationError, match="unknown entries"):
        parse_limits({"a": {"max": 2}})


def test_limit_key_of_reads_only_envelopes_with_the_header():
    assert limit_key_of(body()) is None
    assert limit_key_of(body("k")) == "k"
    assert limit_key_of(b"not json alkstore_limit_key") is None


@pytest.mark.parametrize("fair", [False, True], ids=["", "fair"])
@pytest.mark.parametrize("queues", [["race"], ["race", "other"]], ids=["one", "any"])
def test_concurrent_claimers_never_exceed_the_limit(target, opener, queues, fair):
    """Eight claimers, each its own store (its own connections), race for a queue
    limited to 3; the claims held at once, counted as they are made and acked, never
    exceed it (PostgreSQL: limited_due locks the queue's row, then counts with a fresh
    snapshot). On one queue (claim_one) and beside a queue without a limit (claim_any);
    and with fair share between three keys (each job claimed once, all drained)."""
    import threading

    setup = opener()
    for n in range(300):
        setup.enqueue("race", body(f"k{n % 3}" if fair else None, n=n))
    setup.set_limit("race", 3)
    if fair:
        setup.set_fair("race", {"k0": 2})
    lock = threading.Lock()
    held = [0]
    peak = [0]
    done = [0]
    errors: list[BaseException] = []

    def claimer() -> None:
        s = opener()
        try:
            while True:
                # counted from after the claim committed to before its ack: never
                # more than the store's live claims, so a peak above 3 is a breach
                got = s.claim(queues, limit=2)
                if got:
                    with lock:
                        held[0] += len(got)
                        peak[0] = max(peak[0], held[0])
                    time.sleep(0.002)
                    with lock:
                        held[0] -= len(got)
                        done[0] += len(got)
                    s.ack(got)
                else:
                    with lock:
                        if done[0] >= 300:
                            return
                    time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert done[0] == 300
    assert 1 <= peak[0] <= 3, peak[0]
