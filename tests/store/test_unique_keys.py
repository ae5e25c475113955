"""Unique keys in a table of their own on PostgreSQL (migration 0015, ``unique_keys``).

Since version 17 ``jobs`` is split into generations (docs/architecture.md, "rotating
generations") and has no unique index across them: ``jobs_unique`` is gone, and every
unique-task test (``tests/flow/test_unique.py``: duplicates refused while pending,
delayed or claimed; the key free again after an ack, a dead letter, an expiry or the
claim that clears it; a publisher waiting for an uncommitted holder; eight publisher
processes racing on one key) runs on that layout. Here: a version-14 publisher's unique
insert, which names ``jobs_unique``, is refused on it (upgrade publishers first), and
the keys of jobs stored before the upgrade are kept through it.
"""

from __future__ import annotations

import psycopg
import pytest

from kombu_alkstore.store.schema import SCHEMA_VERSION, build_tables
from tests.conftest import Target, _drop_schema, make_target
from tests.helpers import run_sql, sql_rows
from tests.store.test_migrations import old_script, pg_migrate

pytestmark = pytest.mark.timeout(120)


def names(t: Target) -> dict[str, str]:
    return build_tables(t.schema, "postgresql").names()


#: What a version-14 publisher's insert_unique sends (its own columns, and the index).
V14_INSERT = """INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, max_attempts,
  visibility_timeout, backoff_base, created_at, unique_key, unique_claimed)
VALUES ('celery', %s, '\\x00', 0, 0, 3, 30, 1, 0, %s, true)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING RETURNING id"""


def test_a_version_14_unique_publish_is_refused_on_generations_and_inserts_nothing(pg_target):
    """Its ON CONFLICT names jobs_unique, which version 17 dropped: the server refuses
    the statement (the publisher sees the error; nothing is written, the key stays free)."""
    t = pg_target
    with t.open() as store:
        n = names(t)
        with pytest.raises(psycopg.errors.InvalidColumnReference, match="ON CONFLICT"):
            sql_rows(t, V14_INSERT.format(jobs=n["jobs"]), ("m1", "k"))
        assert sql_rows(t, f"SELECT count(*) FROM {n['jobs']}") == [(0,)]
        assert store.enqueue("celery", b"x", unique_key="k") is not None


def test_the_upgrade_keeps_the_keys_of_stored_jobs(tmp_path):
    t = make_target("postgresql", tmp_path)
    try:
        run_sql(t, old_script("v14", "postgresql", t.schema))
        jobs = names(t)["jobs"]
        [(held,)] = sql_rows(t, V14_INSERT.format(jobs=jobs), ("m1", "k"))
        assert pg_migrate(t.schema) == list(range(15, SCHEMA_VERSION + 1))
        with t.open() as store:
            assert store.enqueue("celery", b"x", unique_key="k") is None
            assert store.unique_holder("celery", "k").id == held
            assert store.enqueue("celery", b"x", unique_key="other") is not None
    finally:
        _drop_schema(t.schema)
