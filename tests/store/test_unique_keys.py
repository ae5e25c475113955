"""Unique keys in a table of their own on PostgreSQL (migration 0015, ``unique_keys``).

Jobs split into generations (docs/architecture.md, "rotating generations") can have no
unique index across them, so the keys must hold without ``jobs_unique``. Here the index
is dropped from each test's schema and Celery's unique-task tests of
``tests/flow/test_unique.py`` run unchanged on it: duplicates refused while pending,
delayed or claimed; the key free again after an ack, a dead letter, an expiry or the
claim that clears it; a publisher waiting for an uncommitted holder; eight publisher
processes racing on one key. Then the keys of jobs written by a version-14 publisher
(its statement still names ``jobs_unique``), and of jobs stored before the upgrade.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kombu_alkstore.store.schema import SCHEMA_VERSION, build_tables
from tests.conftest import Target, _drop_schema, make_target
from tests.flow.test_unique import (  # noqa: F401 - collected here, on this module's target
    test_a_duplicate_while_pending_delayed_or_claimed_is_not_enqueued,
    test_a_key_held_by_a_rolled_back_transaction_is_free_afterwards,
    test_a_publisher_waits_for_an_uncommitted_holder_of_its_key,
    test_after_ack_dead_letter_or_expiry_the_key_is_free_again,
    test_eight_publisher_processes_racing_on_one_key_enqueue_exactly_one,
    test_pipelined_and_batched_publishes_keep_one_per_key,
    test_states_pending_and_delayed_free_the_key_at_the_claim,
)
from tests.helpers import run_sql, sql_rows
from tests.store.test_migrations import old_script, pg_migrate

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def target(tmp_path) -> Iterator[Target]:
    """A PostgreSQL store whose jobs table has no jobs_unique index."""
    t = make_target("postgresql", tmp_path)
    t.open().close()  # made at the current version
    run_sql(t, f'DROP INDEX "{t.schema}".jobs_unique')
    yield t
    _drop_schema(t.schema)


def names(t: Target) -> dict[str, str]:
    return build_tables(t.schema, "postgresql").names()


#: What a version-14 publisher's insert_unique sends (its own columns, and the index).
V14_INSERT = """INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, max_attempts,
  visibility_timeout, backoff_base, created_at, unique_key, unique_claimed)
VALUES ('celery', %s, '\\x00', 0, 0, 3, 30, 1, 0, %s, true)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING RETURNING id"""


def test_a_version_14_publish_takes_its_key_and_an_ack_frees_it(pg_target):
    t = pg_target
    with t.open() as store:
        n = names(t)
        [(first,)] = sql_rows(t, V14_INSERT.format(jobs=n["jobs"]), ("m1", "k"))
        assert sql_rows(t, V14_INSERT.format(jobs=n["jobs"]), ("m2", "k")) == []
        assert store.enqueue("celery", b"x", unique_key="k") is None
        assert store.unique_holder("celery", "k").id == first
        assert sql_rows(t, f"SELECT queue, key, job_id FROM {n['unique_keys']}") == [
            ("celery", "k", first)
        ]
        [d] = store.claim(["celery"])
        assert store.ack([d]) == {d.id}
        assert sql_rows(t, f"SELECT count(*) FROM {n['unique_keys']}") == [(0,)]
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
