"""Setup and opening: idempotent setup, missing or older schemas; bad options, schema
names and URLs refused."""

from __future__ import annotations

import psycopg
import pytest

from kombu_alkstore.errors import ConfigurationError, SchemaMissing
from kombu_alkstore.store import open_store
from kombu_alkstore.store.schema import SCHEMA_VERSION
from tests.helpers import run_sql


# ------------------------------------------------------------------------------ setup
def test_setup_is_idempotent(store, opener):
    jid = store.enqueue("q", b"kept")
    store.setup()
    store.setup()
    assert store.schema_version() == SCHEMA_VERSION
    other = opener()  # a second store on the same schema runs setup again
    assert other.schema_version() == SCHEMA_VERSION
    assert store.get_job(jid).body == b"kept"
    ddl = store.ddl()
    assert ddl and all(isinstance(s, str) for s in ddl)
    assert all("IF NOT EXISTS" in s for s in ddl if s.upper().startswith("CREATE"))


def test_setup_off_on_missing_tables_is_a_clear_error(target):
    with pytest.raises(SchemaMissing, match=target.schema):
        target.open(setup=False)


def test_setup_off_on_an_older_layout_is_a_clear_error_and_setup_upgrades_it(store, target):
    meta = store.tables.qualified(store.tables.meta)
    offers = store.tables.qualified(store.tables.offers)
    jid = store.enqueue("q", b"kept")
    run_sql(target, f"DROP TABLE {offers}")  # as versions 1 and 2 had it
    run_sql(target, f"UPDATE {meta} SET value = '2' WHERE key = 'schema_version'")
    with pytest.raises(SchemaMissing, match=rf"schema version 2, .* needs {SCHEMA_VERSION}"):
        target.open(setup=False)
    upgraded = target.open()  # setup=True adds what is new
    try:
        assert upgraded.schema_version() == SCHEMA_VERSION
        assert upgraded.get_job(jid).body == b"kept"
        target.open(setup=False).close()
    finally:
        upgraded.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("visibility_timeout", -1),
        ("visibility_timeout", 0),
        ("backoff_base", -3),
        ("max_attempts", 0),
        ("dead_letter_retention", -5),
        ("busy_timeout", 0),
        ("visibility_timeout", "soon"),
    ],
)
def test_bad_option_is_refused_and_nothing_written(target, tmp_path, option, value):
    with pytest.raises(ConfigurationError) as err:
        target.open(**{option: value})
    assert option in str(err.value)
    assert repr(value) in str(err.value) or str(value) in str(err.value)
    _assert_nothing_created(target, tmp_path)


@pytest.mark.parametrize("schema", ["bad;drop", "1abc", 'x"y', "", "a" * 49, "sp ace"])
def test_bad_schema_name_is_refused_and_nothing_written(target, tmp_path, schema):
    with pytest.raises(ConfigurationError) as err:
        open_store(target.url, schema=schema)
    assert repr(schema) in str(err.value)
    assert "identifier" in str(err.value)
    if target.engine == "postgresql":
        with psycopg.connect(target.url) as conn:
            n = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()[0]
        assert n == 0
    else:
        assert not (tmp_path / "broker.db").exists()


def _assert_nothing_created(target, tmp_path) -> None:
    if target.engine == "postgresql":
        with psycopg.connect(target.url) as conn:
            n = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (target.schema,)
            ).fetchone()[0]
        assert n == 0
    else:
        assert not (tmp_path / "broker.db").exists()


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://x", "mysql"),
        ("sqlite://", "sqlite://"),
        ("sqlite:///:memory:", ":memory:"),
        ("not a url at all", "not a url at all"),
        ("", "''"),
    ],
)
def test_bad_url_is_refused(url, needle):
    with pytest.raises(ConfigurationError) as err:
        open_store(url)
    assert needle in str(err.value)
