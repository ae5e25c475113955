"""A table of the service's own as a queue, on every engine (tables/queue.py): claim
order, leases, attempts, outcomes, fences, dead letters, and the check at start."""

from __future__ import annotations

import json
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.tables.router import route_tables
from kombu_alkstore.tables.spec import parse_tables
from kombu_alkstore.transport.envelope import to_message
from tests.tables.tablekit import insert, make_table, rows, spec_for

#: A retry_after passed long ago (both engines read this form).
PAST = "2000-01-01 00:00:00+00:00"


def router(store, target, **over):
    return route_tables(store, parse_tables({"emails": spec_for(target, **over)}))


def grouped(store, target, **over):
    """The queue of the group 'emails', dead letters to the group 'dead', one attempt."""
    columns = dict(spec_for(target)["columns"], group="grp")
    return router(store, target, columns=columns, dead={"group": "dead"}, max_attempts=1, **over)


@pytest.fixture
def table(store, target):
    make_table(target)
    return target


def test_claim_order_priority_then_retry_after_then_id(store, table):
    insert(table, json.dumps({"key": "b"}), prio=5)
    insert(table, json.dumps({"key": "d"}), prio=1, retry_after=PAST)
    insert(table, json.dumps({"key": "c"}), prio=1)
    insert(table, json.dumps({"key": "a"}), prio=1)
    r = router(store, table)
    one_by_one = [r.claim(["emails"], 1)[0].row_id for _ in range(2)]
    assert one_by_one == [3, 4]  # the smallest priority; no retry_after first, then by id
    assert [d.row_id for d in r.claim(["emails"], 10)] == [2, 1]  # a batch in claim order
    assert r.claim(["emails"], 10) == []  # leased
    assert [a for _, a, *_ in rows(table)] == [1, 1, 1, 1]


def test_a_row_is_a_celery_task_message(store, table):
    insert(table, json.dumps({"key": "k1"}))
    (d,) = router(store, table).claim(["emails"], 1)
    message = to_message(d)
    headers = message["headers"]
    assert headers["task"] == "tests.apps.proj.mark"
    assert headers["retries"] == 0
    import base64

    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([], {"key": "k1"})


def test_row_mode_passes_the_columns(store, table):
    insert(table, None, recipient="ann@example.com")
    (d,) = router(store, table, mode="row").claim(["emails"], 1)
    import base64

    args, kwargs, _ = json.loads(base64.b64decode(to_message(d)["body"]))
    assert kwargs["recipient"] == "ann@example.com" and kwargs["id"] == 1


def test_future_retry_after_is_scheduled(store, table):
    when = "2999-01-01 00:00:00" if table.engine == "sqlite" else "2999-01-01T00:00:00Z"
    insert(table, "{}", retry_after=when)
    r = router(store, table)
    assert r.claim(["emails"], 5) == [] and not r.has_due(["emails"])
    assert r.next_due(["emails"]) > time.time() + 1e8


def test_ack_marks_processed_or_deletes(store, table):
    insert(table, "{}")
    insert(table, "{}")
    r = router(store, table)
    d1, d2 = r.claim(["emails"], 2)
    assert r.ack([d1]) == {1}
    assert rows(table)[0][2:4] == (True, False)
    assert r.claim(["emails"], 5) == []
    deleting = router(store, table, on_success="delete")
    assert deleting.ack([d2]) == {2}
    assert [x[0] for x in rows(table)] == [1]


def test_fail_delays_then_dead_letters_to_a_dead_table(store, table):
    make_table(table, "email_jobs_dead")
    insert(table, "{}")
    r = router(
        store,
        table,
        dead={
            "table": table.schema + ".email_jobs_dead"
            if table.engine == "postgresql"
            else "email_jobs_dead"
        },
    )
    for attempt in (1, 2, 3):
        (d,) = _claim_soon(r)
        assert d.attempts == attempt
        assert r.fail([d], "boom") == {1}
    assert rows(table) == []
    assert [x[:2] for x in rows(table, "email_jobs_dead")] == [(1, 3)]
    counts = r.tables["emails"].counts()
    assert (counts.pending, counts.dead) == (0, 1)


def test_dead_group(store, table):
    insert(table, "{}", grp="emails")
    r = grouped(store, table)
    (d,) = r.claim(["emails"], 1)
    r.fail([d], "boom")
    assert rows(table)[0][4] == "dead"
    assert r.tables["emails"].counts().dead == 1


def test_spent_attempts_with_no_dead_letter_stay_and_are_not_claimed(store, table):
    insert(table, "{}")
    r = router(store, table, max_attempts=1)
    (d,) = r.claim(["emails"], 1)
    assert r.fail([d], "boom") == {1}
    assert r.claim(["emails"], 5) == []
    assert r.tables["emails"].counts().dead == 1


def test_a_lapsed_lease_is_claimed_again_and_the_old_claim_is_fenced(store, table):
    insert(table, "{}")
    r = router(store, table, visibility_timeout=0.3)
    (old,) = r.claim(["emails"], 1)
    time.sleep(0.5)
    (new,) = r.claim(["emails"], 1)
    assert new.attempts == 2
    assert r.ack([old]) == set() and r.heartbeat([old]) == set()
    assert r.heartbeat([new]) == {1} and r.ack([new]) == {1}


def test_a_lapsed_spent_row_is_dead_lettered_by_the_next_claim(store, table):
    insert(table, "{}", grp="emails")
    r = grouped(store, table, visibility_timeout=0.3)
    assert len(r.claim(["emails"], 1)) == 1  # its worker dies: the lease lapses
    time.sleep(0.5)
    assert r.claim(["emails"], 1) == []
    assert rows(table)[0][4] == "dead"


def test_release_refunds_the_attempt(store, table):
    insert(table, "{}")
    r = router(store, table)
    (d,) = r.claim(["emails"], 1)
    assert r.release([d]) == {1}
    assert rows(table)[0][1:4] == (0, False, False)


def test_jobs_of_the_same_queue_still_flow(store, table):
    store.enqueue("emails", b"x")
    insert(table, "{}")
    got = router(store, table).claim(["emails"], 5)
    assert len(got) == 2


@pytest.mark.parametrize(
    "over, column",
    [
        ({"columns": {"id": "id", "locked_until": "lease", "payload": "body"}}, "'lease'"),
        ({"table": "no_such_table"}, "no such table"),
    ],
)
def test_a_mismatched_mapping_is_refused_naming_the_column(store, table, over, column):
    with pytest.raises(ConfigurationError, match=column) as info:
        router(store, table, **over)
    assert "\n" not in str(info.value)


def _claim_soon(r, timeout: float = 5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = r.claim(["emails"], 1)
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("no row became due")


def test_a_spent_row_left_in_place_is_not_due(store, table):
    """Else every safety poll would find work and claim for nothing."""
    insert(table, "{}")
    r = router(store, table, max_attempts=1)
    (d,) = r.claim(["emails"], 1)
    r.fail([d], "boom")
    assert not r.has_due(["emails"])
