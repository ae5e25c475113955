"""The waiter: woken by another store's enqueue, or timing out."""

from __future__ import annotations

import threading
import time


# ----------------------------------------------------------------------------- waiter
def test_waiter_wakes_on_enqueue_from_another_store(store, opener):
    other = opener()
    waiter = store.waiter()
    try:
        waiter.poll()  # drain anything from setup
        started = threading.Event()

        def publish() -> None:
            started.wait(5)
            time.sleep(0.2)
            other.enqueue("wq", b"x")

        t = threading.Thread(target=publish)
        t.start()
        started.set()
        t0 = time.monotonic()
        wake = waiter.wait(5)
        elapsed = time.monotonic() - t0
        t.join()
        assert wake, wake
        assert elapsed < 1.2, elapsed
        if store.capabilities.listener:  # its wake-ups name the queues
            assert "wq" in wake.queues
        assert [d.body for d in store.claim(["wq"], 1)] == [b"x"]
    finally:
        waiter.close()


def test_waiter_times_out_when_nothing_happens(store):
    waiter = store.waiter()
    try:
        waiter.poll()
        t0 = time.monotonic()
        wake = waiter.wait(0.3)
        elapsed = time.monotonic() - t0
        assert not wake
        assert 0.25 <= elapsed < 1.5
        assert not waiter.poll()
    finally:
        waiter.close()


def test_a_waiter_told_to_stop_hearing_wakeups_hears_none_until_told_again(store, opener):
    other = opener()
    waiter = store.waiter()
    try:
        waiter.poll()
        stopped = waiter.hear_wakeups(False)
        assert stopped == store.capabilities.listener  # a LISTEN can be undone
        if not stopped:  # the engine cannot stop them (it polls): still heard
            other.enqueue("wq", b"heard")
            assert waiter.wait(5)
            return
        other.enqueue("wq", b"unheard")
        assert not waiter.wait(0.5)
        assert waiter.hear_wakeups(True)
        other.enqueue("wq", b"heard")
        assert "wq" in waiter.wait(5).queues
        assert [d.body for d in store.claim(["wq"], 2)] == [b"unheard", b"heard"]
    finally:
        waiter.close()
