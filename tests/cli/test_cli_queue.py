"""``kombu-alkstore queue pause|resume NAME``: the store's pause, from the command line."""

from __future__ import annotations

from tests.cli.conftest import run_cli


def test_queue_pause_and_resume(target):
    store = target.open()
    store.enqueue("q", b"1")
    r = run_cli(target, "queue", "pause", "q")
    assert (r.code, r.out) == (0, "queue 'q' paused\n")
    assert run_cli(target, "queue", "pause", "q").out == "queue 'q' was paused already\n"
    assert store.claim(["q"], 1) == []
    r = run_cli(target, "queue", "resume", "q")
    assert (r.code, r.out) == (0, "queue 'q' resumed\n")
    assert run_cli(target, "queue", "resume", "q").out == "queue 'q' was not paused\n"
    assert len(store.claim(["q"], 1)) == 1
    store.close()


def test_queue_pause_refuses_a_bad_name(target):
    target.open().close()
    r = run_cli(target, "queue", "pause", "")
    assert r.code == 1 and "queue name" in r.err


def test_clearing_the_queue_wide_limit_says_its_key_limits_stay(target):
    with target.open() as store:
        store.enqueue("q", b"1")
        assert run_cli(target, "queue", "limit", "q", "4").code == 0
        assert run_cli(target, "queue", "limit", "q", "1", "--key", "*").code == 0
        r = run_cli(target, "queue", "limit", "q", "--clear")
        assert r.code == 0, r.err
        assert r.out.splitlines()[0] == (
            "queue 'q': no queue-wide limit; its per-key limits stay ('*': --clear --key K "
            "clears one)"
        )
        (limit,) = [q for q in store.limits() if q.queue == "q"]
        assert (limit.limit, limit.keys) == (None, {"*": 1})
        r = run_cli(target, "queue", "limit", "q", "--clear", "--key", "*")
        assert r.out.splitlines()[0] == "queue 'q' key '*': no limit"
        assert [q for q in store.limits() if q.queue == "q"] == []
