"""The README's least-privilege recipe on PostgreSQL: a migration role applies
``kombu-alkstore setup --print --grant ROLE``; the runtime role (no CREATE) connects with
``setup=False`` and the transport works."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from kombu import Connection

import kombu_alkstore  # noqa: F401
from kombu_alkstore.errors import SchemaMissing
from kombu_alkstore.store import open_store
from tests.cli.conftest import run_cli


@pytest.fixture
def runtime_role(pg_target):
    role = f"alk_rt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    yield role
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{pg_target.schema}" CASCADE')
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


def role_url(target, role: str) -> str:
    return target.url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


def test_runtime_role_without_create(pg_target, runtime_role):
    url = role_url(pg_target, runtime_role)
    assert url != pg_target.url
    # Before the migration the runtime role gets the clear "run setup" error.
    with pytest.raises(SchemaMissing):
        open_store(url, schema=pg_target.schema, setup=False)

    r = run_cli(pg_target, "setup", "--print", "--grant", runtime_role)
    assert r.code == 0, r.err
    with psycopg.connect(pg_target.url, autocommit=True) as conn:  # the migration role
        conn.execute(r.out)

    # The runtime role may not create tables...
    with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.Error):
        conn.execute(f'CREATE TABLE "{pg_target.schema}".nope (x int)')
    # ...yet the transport works with setup off: publish, consume, ack.
    options = {"schema": pg_target.schema, "setup": False}
    with Connection(f"alkstore+{url}", transport_options=options) as conn:
        queue = conn.SimpleQueue("lp")
        queue.put({"hello": "world"})
        message = queue.get(timeout=10)
        assert message.payload == {"hello": "world"}
        message.ack()
        queue.close()

    # The operator CLI works as the runtime role too.
    broker = f"alkstore+{url}"
    r = run_cli(pg_target, "status", broker=broker)
    assert r.code == 0, r.err
    store = open_store(url, schema=pg_target.schema, setup=False)
    try:
        store.enqueue("lp", b"x", msg_id="lp-1")
        store.fail(store.claim(["lp"]), "boom")
        store.sweep()
    finally:
        store.close()
    r = run_cli(pg_target, "dead", "requeue", "lp-1", broker=broker)
    assert r.code == 0 and "requeued 1" in r.out, r.err
