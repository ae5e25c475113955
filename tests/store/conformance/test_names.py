"""Names are data: hostile, Unicode and long names everywhere a name goes."""

from __future__ import annotations

import pytest

from kombu_alkstore.store.schema import SCHEMA_VERSION
from tests.store.conformance.helpers import _sched, claim_one, total_jobs

# ---------------------------------------------------------------------- names as data
NASTY = [
    "q'; DROP TABLE jobs; --",
    'dq"x"',
    "ünïcödé-名前-очередь",
    "emoji-🎉🐍👩‍💻",
    "params %s %(x)s ? :name $1 {jobs}",
    "back\\slash\ttab\nnewline",
]


def _long_name(seed: str) -> str:
    s = (seed + " '\"🎉ü名") * 40
    return s[:200]


@pytest.mark.parametrize("name", [*NASTY, _long_name("long")], ids=range(len(NASTY) + 1))
def test_names_are_stored_and_claimed_as_data(store, name):
    assert len(_long_name("x")) == 200
    jid = store.enqueue(name, b"body", msg_id=name)
    store.enqueue("plain", b"other")
    d = claim_one(store, name)
    assert (d.id, d.queue, d.msg_id) == (jid, name, name)
    job = store.get_job(name)
    assert (job.id, job.queue, job.msg_id) == (jid, name, name)
    store.exchange_declare(name, "topic")
    assert store.exchange_type(name) == "topic"
    store.bind(name, name, name)
    assert store.bindings(name) == [(name, name)]
    store.queue_declare(name, message_ttl=100)
    assert store.queue_exists(name)
    (c,) = store.counts([name])
    assert (c.queue, c.processing) == (name, 1)
    assert store.fail([d], name) == {jid}
    assert store.dead_list(name)[0].last_error == name
    assert store.get_job(name).state == "dead"
    assert store.lease_acquire(name, name, 10)
    assert store.lease_holder(name) == name
    store.schedule_upsert(_sched(name, 5, 1.0, task=name, args=name))
    assert store.schedule_list()[0].name == name
    assert store.dead_requeue(queue=name) == 1
    assert store.purge(name) == 1
    store.unbind(name, name, name)
    store.exchange_delete(name)
    assert store.queue_delete(name) == 0
    assert total_jobs(store, "plain") == 1  # nothing else touched
    assert store.schema_version() == SCHEMA_VERSION
