"""A slot of a limited queue freed by a lapse is taken at once (issue 32), on both engines.

An ack or dead letter of a limited queue announces the queue, so a worker refused by the
limit claims again at once; a lapse (the claim's worker was killed -9) commits nothing
and announces nothing. The refused worker learns, with the next due time, when the
earliest live claim of the limited queue lapses (next_due) and claims then: the lapsed
slot is reused about one visibility timeout after the kill, long before the safety-net
poll (``polling_interval``) could have found it. Before, the idle worker waited for
that poll (here 60 s, so the wait below failed).

Both workers start with nothing queued, so neither learns a due time at its start: the
refused one is refused by a publish later and must learn the lapse time from that refusal.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.helpers import kill_group, make_app, read_record, wait_for, worker_process

pytestmark = pytest.mark.timeout(180)

APP = "tests.flow.limits_app"
QUEUE = "limited"
#: The safety-net poll: the lapsed slot must be taken long before it could run.
POLL = 60.0
#: The visibility timeout: a killed worker's claim lapses at most this long after its
#: last heartbeat (every third of it).
VT = 2.0


def starts(record, host: str | None = None) -> list[tuple[float, int, str]]:
    """(time, task number, worker name) of every start (on worker ``host``), in time order."""
    rows = [r for r in read_record(record) if r[0] == "start"]
    got = sorted((float(r[3]), int(r[1]), r[5].split("@")[0]) for r in rows)
    return [s for s in got if host is None or s[2] == host]


def ends(record, host: str) -> set[int]:
    return {int(r[1]) for r in read_record(record) if r[0] == "end" and r[5].startswith(host)}


def ready(log) -> bool:
    return log.exists() and b" ready." in log.read_bytes()


def test_a_lapsed_slot_is_taken_before_the_safety_poll(target, tmp_path):
    opts = dict(target.transport_options, polling_interval=POLL, visibility_timeout=VT)
    app = make_app(target, transport_options=opts)

    @app.task(name="limits.span", shared=False)
    def span(n, key, duration):
        return n

    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_PREFETCH": "1"}
    record = tmp_path / "record.tsv"
    with target.open() as store:
        store.set_limit(QUEUE, 1)
        workers = {}
        try:
            for name in ("w1", "w2"):
                log = tmp_path / f"{name}.log"
                cm = worker_process(
                    target,
                    record,
                    "-P",
                    "threads",
                    "-c",
                    "2",
                    "-n",
                    f"{name}@%h",
                    "-Q",
                    QUEUE,
                    app=APP,
                    log=log,
                    **env,
                )
                workers[name] = (cm, cm.__enter__(), log)
            # Both idle with nothing queued: neither learns a due time at its start.
            wait_for(lambda: all(ready(log) for *_, log in workers.values()), 60, interval=0.2)
            # Announced: both claim, one takes the slot, the other is refused.
            span.apply_async((0, "long", 30.0), queue=QUEUE)
            wait_for(lambda: starts(record), 30, interval=0.05)
            holder = starts(record)[0][2]
            [other] = set(workers) - {holder}
            for n in (1, 2, 3):  # announced: the other claims again, refused
                span.apply_async((n, "short", 0.01), queue=QUEUE)
            # The holder heartbeats past several deadlines: the slot stays taken.
            time.sleep(3 * VT)
            assert [n for _, n, _ in starts(record)] == [0], "the limit of 1 was passed"
            assert [u.used for u in store.limits()] == [1]
            kill_group(workers[holder][1], signal.SIGKILL)
            killed = time.time()
            # The claim lapses within VT of the kill; the other worker takes the slot
            # then (the short tasks first: they were due before the lapsed one). Its
            # safety poll would first run POLL seconds after it started.
            wait_for(lambda: ends(record, other) >= {1, 2, 3}, POLL / 2, interval=0.05)
        finally:
            for cm, *_ in workers.values():
                cm.__exit__(None, None, None)
    first, n, _ = starts(record, other)[0]
    delay = first - killed
    print(f"{target.engine}: first task on {other} {delay:.2f} s after the kill (VT {VT} s)")
    assert n in (0, 1)
    assert first > killed  # never while the holder held the slot
    assert delay < POLL / 3  # long before the safety poll (measured: about VT)
