"""The hand-off wire format (PostgreSQL): the JSON object the publisher's insert builds
and ``store/postgres/handoff.py`` decodes, end to end through a real NOTIFY."""

from __future__ import annotations

import base64
import json

import psycopg
import pytest

from kombu_alkstore.store.postgres import handoff

#: NOTIFY refuses a payload of this many bytes or more.
NOTIFY_LIMIT = 8000


@pytest.fixture
def offered(pg_target):
    """A store, a waiter with one slot offered on channel 7 for queue "q", and a raw
    LISTEN on the waiter's own channel (the payload as it travels)."""
    store = pg_target.open()
    waiter = store.waiter()
    params = {"pid": waiter.address, "chan": 7, "queues": ["q"], "slots": 1}
    store._run("register", params)
    raw = psycopg.connect(pg_target.url, autocommit=True)
    raw.execute(f'LISTEN "alkstore_w{waiter.address}"')
    yield store, waiter, raw
    raw.close()
    waiter.close()
    store.close()


def _payload(raw: psycopg.Connection) -> str:
    [note] = list(raw.notifies(timeout=5, stop_after=1))
    return note.payload


def test_a_handed_off_job_round_trips(offered):
    store, waiter, raw = offered
    body = bytes(range(256)) * 3
    jid = store.enqueue(
        "q",
        body,
        msg_id="m-1",
        priority=4,
        max_attempts=5,
        backoff_base=2.5,
        visibility_timeout=30,
    )
    payload = _payload(raw)
    tag, fields = json.loads(payload)
    assert tag == "h"
    assert sorted(fields) == sorted(
        [
            "chan",
            "id",
            "token",
            "queue",
            "priority",
            "attempts",
            "max_attempts",
            "backoff_base",
            "deadline",
            "msg_id",
            "body",
            "visibility_timeout",
        ]
    )
    chan, delivery = handoff.decode(payload)
    assert chan == 7
    assert (delivery.id, delivery.queue, delivery.body, delivery.msg_id) == (jid, "q", body, "m-1")
    assert (delivery.priority, delivery.attempts, delivery.max_attempts) == (4, 1, 5)
    assert (delivery.backoff_base, delivery.visibility_timeout) == (2.5, 30.0)
    assert delivery.revoked is False
    # The waiter reads the same object, and the claim it carries is the job's own.
    assert waiter.wait(5).handoffs == [(7, delivery)]
    assert store.get_job(jid).deadline == pytest.approx(delivery.deadline)
    assert store.ack([delivery]) == {jid}


def _largest_body(store, queue: str, msg_id: str) -> bytes:
    """The largest body the insert still hands off (its size check at the limit)."""
    with psycopg.connect(store.url.conninfo) as conn:

        def size(n: int) -> int:
            sql = (
                "SELECT octet_length(json_build_array(%s::text, %s::text,"
                " encode(%s::bytea, 'base64'))::text)"
            )
            return conn.execute(sql, (queue, msg_id, b"\xff" * n)).fetchone()[0]

        low, high = 0, 8000
        while low < high:  # the largest n whose size is within the limit
            mid = (low + high + 1) // 2
            low, high = (mid, high) if size(mid) <= handoff.MAX_BYTES else (low, mid - 1)
    return b"\xff" * low


def test_the_publishers_size_check_agrees_with_postgresqls_json(pg_target):
    """handoff.fits counts what PostgreSQL would write for the job's queue, message id
    and base64 body (escapes, line breaks), without building it: the same answer for
    every name, id and size tried, at the limit and around the base64's line breaks."""
    names = ["q", "é-queue", 'qu"ote\\', "tab\tq", "🐍" * 20]
    ids = [None, "m" * 36, 'id"\\\x01', "ü" * 100]
    sizes = [0, 1, 2, 3, 56, 57, 58, 59, 114, *range(5600, 5720)]
    sql = (
        "SELECT octet_length(json_build_array(%s::text, %s::text,"
        " encode(%s::bytea, 'base64'))::text)"
    )
    with psycopg.connect(pg_target.url) as conn:
        for queue in names:
            for msg_id in ids:
                for n in sizes:
                    body = b"\xff" * n
                    size = conn.execute(sql, (queue, msg_id, body)).fetchone()[0]
                    assert handoff.fits(queue, msg_id, body) == (size <= handoff.MAX_BYTES), (
                        queue,
                        msg_id,
                        n,
                        size,
                    )


def test_the_largest_handoff_fits_in_a_notification(offered):
    """Numbers at their widest and the variable part at its limit: below 8000 bytes."""
    store, waiter, raw = offered
    queue, msg_id = "q", "m" * 36
    body = _largest_body(store, queue, msg_id)
    huge = 1.2345678901234567e300
    store.enqueue(
        queue,
        body,
        msg_id=msg_id,
        priority=255,
        max_attempts=2**31 - 1,
        backoff_base=huge,
        visibility_timeout=huge,
    )
    payload = _payload(raw)
    # Our job id is short: count it at its widest (19 digits).
    chan, delivery = handoff.decode(payload)
    widest = len(payload.encode()) + 19 - len(str(delivery.id)) + 10 - len(str(chan))
    assert widest < NOTIFY_LIMIT, widest
    assert delivery.body == body and delivery.max_attempts == 2**31 - 1
    [(_, got)] = waiter.wait(5).handoffs
    assert got == delivery


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        '"routing"',
        '[null, "q"]',
        '["h", 1, 2]',
        "{}",
        '["h", {"chan": 1, "id": 2}]',
        json.dumps(["h", {"chan": 1, "body": "@@", "id": 1}]),
        json.dumps({"chan": 1, "id": 2}),  # untagged
    ],
)
def test_anything_else_is_refused(payload):
    with pytest.raises(handoff.DECODE_ERRORS):
        handoff.decode(payload)


def test_the_body_travels_in_base64():
    fields = {
        "chan": 3,
        "id": 1,
        "token": 2,
        "queue": "q",
        "priority": 0,
        "attempts": 1,
        "max_attempts": 3,
        "backoff_base": 1.0,
        "deadline": 10.0,
        "msg_id": None,
        "body": base64.encodebytes(b"\x00payload" * 20).decode(),  # with line breaks
        "visibility_timeout": 30.0,
    }
    chan, delivery = handoff.decode(json.dumps(["h", fields]))
    assert chan == 3 and delivery.body == b"\x00payload" * 20


def test_the_earlier_positional_format_is_read_during_an_upgrade():
    """A publisher of the version before issue 15 hands off to a new worker."""
    body = base64.b64encode(b"old").decode()
    old = ["h", 3, 41, 99, "q", 2, 5, 1.5, 100.0, "m-1", body, 30.0]
    chan, delivery = handoff.decode(json.dumps(old))
    assert chan == 3
    assert (delivery.id, delivery.token, delivery.queue, delivery.body) == (41, 99, "q", b"old")
    assert (delivery.priority, delivery.attempts, delivery.max_attempts) == (2, 1, 5)
    assert (delivery.deadline, delivery.msg_id, delivery.visibility_timeout) == (100.0, "m-1", 30.0)
    chan, delivery = handoff.decode(json.dumps(old[:-1]))  # before visibility_timeout
    assert delivery.visibility_timeout is None


def test_a_worker_of_the_earlier_version_only_wakes_on_the_new_format(offered):
    """The decoding of the version before issue 15 (postgres.py ``_collect``), applied to
    what this version sends: it raises one of the errors it caught (so that worker wakes
    and its claim lapses), never one that would stop its event loop."""
    store, _, raw = offered
    store.enqueue("q", b"x")
    payload = json.loads(_payload(raw))
    assert payload[0] == "h"
    with pytest.raises(ValueError):  # its `_handoff(payload)`: payload[:11] unpacked
        _, chan, id_, token, queue, priority, max_attempts, bb, deadline, msg_id, body = payload[
            :11
        ]
