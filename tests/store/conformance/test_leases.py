"""Named leases: acquire, renew, lapse, steal, release."""

from __future__ import annotations

import time


# ----------------------------------------------------------------------------- leases
def test_leases(store):
    assert store.lease_holder("lead") is None
    assert store.lease_acquire("lead", "a", 0.4)
    assert store.lease_holder("lead") == "a"
    assert not store.lease_acquire("lead", "b", 10)
    assert store.lease_holder("lead") == "a"
    assert store.lease_acquire("lead", "a", 0.4)  # renew
    assert store.lease_acquire("other", "b", 10)  # independent names
    time.sleep(0.5)
    assert store.lease_holder("lead") is None  # lapsed
    assert store.lease_acquire("lead", "b", 10)  # stolen after expiry
    assert store.lease_holder("lead") == "b"
    assert not store.lease_acquire("lead", "a", 10)
    assert not store.lease_release("lead", "a")  # not the holder
    assert store.lease_holder("lead") == "b"
    assert store.lease_release("lead", "b")
    assert store.lease_holder("lead") is None
    assert not store.lease_release("lead", "b")
    assert store.lease_acquire("lead", "a", 10)
