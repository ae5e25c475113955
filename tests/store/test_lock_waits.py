"""A write that waited for the SQLite file's lock is stamped when it got the lock.

Issue 29, defect 5: ``claim`` (and heartbeat, pend, kill, maintain) bound ``now`` before
``BEGIN IMMEDIATE`` waited up to ``busy_timeout``; with a 1.5 s visibility timeout and
another writer holding the lock 2 s, a job was claimed with its deadline already passed
and claimed again at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

VT = 1.5
#: How long the other writer holds the lock: longer than VT before a claim; shorter before
#: a heartbeat (one that waited past the deadline rightly finds the claim lapsed).
HOLD = {"claim": 2.0, "heartbeat": 1.0}


@pytest.fixture
def sqlite_target(tmp_path):
    from tests.conftest import make_target

    return make_target("sqlite", tmp_path)


def _hold_write_lock(path: str, held: threading.Event, seconds: float) -> threading.Thread:
    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("operation", ["claim", "heartbeat"])
def test_a_write_that_waited_for_the_lock_is_not_born_lapsed(sqlite_target, operation):
    path = sqlite_target.url.removeprefix("sqlite:///")
    with sqlite_target.open(visibility_timeout=VT) as store:
        store.enqueue("q", b"x")
        if operation == "heartbeat":
            (delivery,) = store.claim(["q"], 1)
        held = threading.Event()
        holder = _hold_write_lock(path, held, HOLD[operation])
        assert held.wait(5)
        if operation == "claim":
            (delivery,) = store.claim(["q"], 1)
        else:
            assert store.heartbeat([delivery]) == {delivery.id}
        got_it = time.time()
        holder.join(10)
        job = store.get_job(delivery.id)
        # Not claimable again: its claim runs VT from when the lock was ours.
        assert store.claim(["q"], 1) == [], "claimed again at once: born lapsed"
        assert job.deadline > got_it + VT - 0.3, job.deadline - got_it


def test_a_lock_held_past_busy_timeout_says_who_may_hold_it(sqlite_target):
    """The write lock still held after ``busy_timeout``: StoreUnavailable (a retry may
    succeed) naming the file, the timeout and the likely holder, not a bare "database is
    locked"."""
    from kombu_alkstore.errors import StoreUnavailable

    store = sqlite_target.open(busy_timeout=0.2)
    path = sqlite_target.url.removeprefix("sqlite:///")
    held = threading.Event()
    holder = _hold_write_lock(path, held, 1.0)
    try:
        assert held.wait(5)
        with pytest.raises(StoreUnavailable) as caught:
            store.enqueue("q", b"x")
        assert str(caught.value) == (
            f"the broker's SQLite file {path} stayed locked for busy_timeout=0.2 s: another "
            "connection holds a write transaction on it. If it is your own (a Django or "
            "SQLAlchemy transaction on this file), publish inside it: "
            "kombu_alkstore.django.atomic() or kombu_alkstore.transaction(conn)"
        )
    finally:
        holder.join()
        store.close()
