"""Registration, URL forms and transport options."""

from __future__ import annotations

import warnings

import pytest
from celery import Celery
from kombu import Connection

import kombu_alkstore  # noqa: F401
from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.transport import Transport


@pytest.mark.parametrize(
    "url,engine",
    [
        ("alkstore+postgresql://postgres@127.0.0.1:5432/test", "postgresql"),
        ("alkstore+postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql"),
        ("alkstore+sqlite:///relative.db", "sqlite"),
        ("alkstore+sqlite:////tmp/absolute.db", "sqlite"),
    ],
)
def test_url_forms_resolve_to_the_transport(url, engine):
    conn = Connection(url)
    transport = conn.transport
    assert isinstance(transport, Transport)
    assert transport.store_url.engine == engine


def test_broker_transport_setting_with_a_plain_url():
    app = Celery("x", broker="sqlite:///plain.db", set_as_current=False)
    app.conf.broker_transport = "kombu_alkstore.transport:Transport"
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, Transport)
        assert conn.transport.store_url.path == "plain.db"


def test_password_is_masked_in_uri():
    conn = Connection("alkstore+postgresql://bob:secret@db.example:5432/app")
    assert "secret" not in conn.as_uri()
    assert "bob" in conn.as_uri()


@pytest.mark.parametrize(
    "options,name",
    [
        ({"visibility_timeout": -1}, "visibility_timeout"),
        ({"visibility_timeout": "soon"}, "visibility_timeout"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"polling_interval": 0}, "polling_interval"),
        ({"schema": "bad;drop"}, "bad;drop"),
        ({"sweep_interval": 3600}, "sweep_interval"),
    ],
)
def test_bad_option_is_an_error_naming_it(options, name):
    with pytest.raises(ConfigurationError, match=name.replace(";", ";")):
        Connection("alkstore+sqlite:///x.db", transport_options=options).transport  # noqa: B018


def test_unknown_option_is_a_warning_naming_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Connection("alkstore+sqlite:///x.db", transport_options={"visiblity": 3}).transport  # noqa: B018
    assert any("visiblity" in str(w.message) for w in caught)


def test_a_redis_option_left_in_says_what_to_use_instead():
    """An app switched from Redis keeps its options; the warning names our equivalent
    (issue 33)."""
    options = {"global_keyprefix": "app1:"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Connection("alkstore+sqlite:///x.db", transport_options=options).transport  # noqa: B018
    (message,) = [str(w.message) for w in caught if "global_keyprefix" in str(w.message)]
    assert "use the option 'schema'" in message, message


def test_durable_publish_off_behind_a_transaction_pooler_is_a_warning():
    """It cannot take effect there (the pooler refuses the session option), so it says
    so rather than doing nothing silently (issue 29, item 13)."""
    listen = "postgresql://postgres@127.0.0.1:5432/test"
    options = {"transaction_pooler": True, "durable_publish": False, "listen_url": listen}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Connection("alkstore+sqlite:///x.db", transport_options=options).transport  # noqa: B018
    assert any("durable_publish=False has no effect" in str(w.message) for w in caught)


@pytest.mark.parametrize("url", ["alkstore+mysql://x/y", "alkstore+sqlite://", "alkstore+foo://x"])
def test_bad_url_is_a_clear_error(url):
    with pytest.raises((ConfigurationError, ValueError)):
        Connection(url).transport  # noqa: B018


@pytest.mark.parametrize(
    "options,name",
    [
        ({"visibility_timeout": float("inf")}, "visibility_timeout"),
        ({"visibility_timeout": "inf"}, "visibility_timeout"),
        ({"ack_flush_interval": float("inf")}, "ack_flush_interval"),
        ({"polling_interval": float("nan")}, "polling_interval"),
        ({"visibility_timeout": 30, "heartbeat_interval": 30}, "heartbeat_interval"),
        ({"heartbeat_interval": 400}, "heartbeat_interval"),  # default timeout 300 s
        # shorter than a claim's delivery: every claim lapses, a storm of duplicate runs
        ({"visibility_timeout": 0.005}, "visibility_timeout .* at least 1"),
        # live workers' queues would be dropped between their refreshes (issue 29, 2)
        ({"queue_expiry_grace": 0}, "queue_expiry_grace .* twice sweep_interval"),
        ({"queue_expiry_grace": 50, "sweep_interval": 30}, "queue_expiry_grace"),
    ],
)
def test_infinite_and_inconsistent_options_are_refused(options, name):
    with pytest.raises(ConfigurationError, match=name):
        Connection("alkstore+sqlite:///x.db", transport_options=options).transport  # noqa: B018


@pytest.mark.parametrize(
    "url,name",
    [
        (
            "alkstore+postgresql://postgres@127.0.0.1:5432/test?connect_timeout=abc",
            "connect_timeout",
        ),
        ("alkstore+postgresql://postgres@127.0.0.1:5432/test?conect_timeout=3", "conect_timeout"),
        ("alkstore+sqlite:///x.db?timeout=5", "timeout"),
        ("alkstore+sqlite:///x.db?busy_timeout=5", "busy_timeout"),
    ],
)
def test_bad_url_parameters_are_refused_naming_them(url, name):
    """Refused at once, not retried as a connection error nor silently ignored."""
    with pytest.raises(ConfigurationError, match=name):
        Connection(url).transport  # noqa: B018


def test_a_kombu_failover_list_switches_to_the_next_alkstore_url(pg_target):
    """ "alkstore+…;alkstore+…": the first server is down, the switch reaches the second."""
    from tests.private_pg import _free_port

    down = f"alkstore+postgresql://postgres@127.0.0.1:{_free_port()}/test"
    url = f"{down};{pg_target.broker_url}"
    with Connection(url, transport_options=pg_target.transport_options) as conn:
        conn.ensure_connection(max_retries=3, interval_start=0, interval_step=0.1)
        assert conn.transport.store_url.url.port == 5432
        q = conn.SimpleQueue("failover")
        q.put({"ok": 1})
        assert q.get(timeout=5).payload == {"ok": 1}
        q.close()
