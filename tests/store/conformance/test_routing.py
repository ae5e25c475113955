"""Exchanges, bindings, the routing version, queue declarations."""

from __future__ import annotations

import math
import time

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.store import NewJob
from tests.store.conformance.helpers import EPS


# ---------------------------------------------------------------------------- routing
def test_exchanges_bindings_and_routing_version(store):
    v0 = store.routing_version()
    assert store.exchange_type("ex") is None
    store.exchange_declare("ex", "direct")
    v1 = store.routing_version()
    assert v1 != v0
    assert store.exchange_type("ex") == "direct"
    store.exchange_declare("ex", "direct")  # no change, no bump
    assert store.routing_version() == v1
    store.exchange_declare("ex", "topic")
    v2 = store.routing_version()
    assert v2 != v1 and store.exchange_type("ex") == "topic"
    store.bind("ex", "a.*", "q1")
    store.bind("ex", "b.#", "q2")
    store.bind("ex", "", "q3")
    v3 = store.routing_version()
    assert v3 != v2
    store.bind("ex", "a.*", "q1")  # already bound
    assert store.routing_version() == v3
    assert sorted(store.bindings("ex")) == [("", "q3"), ("a.*", "q1"), ("b.#", "q2")]
    store.unbind("ex", "b.#", "q2")
    v4 = store.routing_version()
    assert v4 != v3
    assert sorted(store.bindings("ex")) == [("", "q3"), ("a.*", "q1")]
    store.unbind("ex", "b.#", "q2")  # nothing to unbind
    assert store.routing_version() == v4
    store.exchange_declare("fan", "fanout")
    store.bind("fan", "", "q1")
    store.exchange_delete("ex")
    assert store.exchange_type("ex") is None
    assert store.bindings("ex") == []
    assert store.bindings("fan") == [("", "q1")]
    assert store.routing_version() not in (v0, v1, v2, v3, v4)
    with pytest.raises(ConfigurationError, match="headers"):
        store.exchange_declare("h", "headers")
    assert store.exchange_type("h") is None


def test_routing_is_shared_between_stores(store, opener):
    other = opener()
    store.exchange_declare("ex", "fanout")
    store.bind("ex", "", "q")
    assert other.exchange_type("ex") == "fanout"
    assert other.bindings("ex") == [("", "q")]
    assert other.routing_version() == store.routing_version()


def test_queue_declare_message_ttl_stamps_expires_at(store):
    store.queue_declare("ttl", message_ttl=10)
    t0 = time.time()
    jid = store.enqueue("ttl", b"x")
    assert t0 + 10 - EPS <= store.get_job(jid).expires_at <= time.time() + 10 + EPS
    own = store.enqueue("ttl", b"own", expires_at=t0 + 1000)
    assert store.get_job(own).expires_at == pytest.approx(t0 + 1000)
    assert store.get_job(store.enqueue("no-ttl", b"y")).expires_at is None


def test_queue_declare_exists_delete(store):
    assert not store.queue_exists("q")
    store.queue_declare("q")
    store.queue_declare("q")  # refresh
    assert store.queue_exists("q")
    store.bind("ex", "rk", "q")
    store.enqueue_many([NewJob("q", b"x") for _ in range(3)])
    keep = store.enqueue("other", b"o")
    assert store.queue_delete("q") == 3
    assert not store.queue_exists("q")
    assert store.bindings("ex") == []
    assert store.claim(["q"], 10) == []
    assert store.get_job(keep) is not None
    assert store.queue_delete("q") == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"message_ttl": -5}, {"expires": -1}, {"message_ttl": math.nan}, {"expires": 0}],
    ids=repr,
)
def test_queue_declare_bad_timeouts_are_refused(store, kwargs):
    ((name, value),) = kwargs.items()
    with pytest.raises(ConfigurationError) as err:
        store.queue_declare("q", **kwargs)
    assert name in str(err.value) and repr(value) in str(err.value)
    assert not store.queue_exists("q")


def test_bad_names_for_routing_are_refused(store):
    v = store.routing_version()
    with pytest.raises(ConfigurationError, match="exchange name"):
        store.exchange_declare("", "direct")
    with pytest.raises(ConfigurationError, match="queue name"):
        store.bind("ex", "rk", "")
    with pytest.raises(ConfigurationError, match="NUL"):
        store.bind("ex", "r\x00k", "q")
    with pytest.raises(ConfigurationError, match="queue name"):
        store.queue_declare("")
    assert store.routing_version() == v
    assert store.bindings("ex") == []
    assert not store.queue_exists("")
