"""Least privilege on PostgreSQL, beyond tests/cli/test_cli_least_privilege.py (which
applies ``setup --print --grant`` and uses the transport and the CLI as the runtime role).

Here: a role without rights on the schema gets a clear error at connect, quickly (never a
hang, never a retry loop); a role with rights on the schema but not on its tables fails
clearly at first use, and a worker configured with it exits instead of spinning; a role
that may not log in is a clear connection error; and a role with only table DML (granted
by hand: no CREATE anywhere) runs a real Celery worker, dead letters, sweeps, leases and
beat schedules with ``setup=False`` and also with the default ``setup=True`` once the
schema is current (setup then runs no DDL). Roles have unique names and are dropped.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import psycopg
import pytest
from celery.exceptions import Reject
from kombu import Connection

import kombu_alkstore  # noqa: F401
from celery_beat_alkstore import api as beat_api
from kombu_alkstore.errors import ConfigurationError, StoreUnavailable
from kombu_alkstore.store import open_store
from tests.conftest import Target
from tests.helpers import make_app, run_solo_worker, thread_worker, wait_for

pytestmark = pytest.mark.timeout(120)


def admin(target, *statements: str) -> None:
    with psycopg.connect(target.url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def role(pg_target):
    """A fresh LOGIN role with no privileges, dropped (with its grants) at the end."""
    name = f"alk_f_{uuid.uuid4().hex[:10]}"
    admin(pg_target, f'CREATE ROLE "{name}" LOGIN')
    yield name
    admin(
        pg_target,
        f'DROP SCHEMA IF EXISTS "{pg_target.schema}" CASCADE',
        f'DROP OWNED BY "{name}"',
        f'DROP ROLE "{name}"',
    )


def as_role(target, role: str) -> Target:
    url = target.url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    assert url != target.url
    return Target(target.engine, url, target.schema)


def made_by_admin(target) -> None:
    open_store(target.url, schema=target.schema).close()  # the migration role's setup


def grant_dml(target, role: str) -> None:
    s = target.schema
    admin(
        target,
        f'GRANT USAGE ON SCHEMA "{s}" TO "{role}"',
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{s}" TO "{role}"',
        f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{s}" TO "{role}"',
    )


def worker_exit(target: Target, options: dict, timeout: float = 60) -> tuple[int | None, str]:
    """Run a worker with ``target``; its exit code (None if still running) and output."""
    env = {
        "ALKSTORE_TEST_BROKER": target.broker_url,
        "ALKSTORE_TEST_SCHEMA": target.schema,
        "ALKSTORE_TEST_OPTIONS": json.dumps(options),
    }
    try:
        proc = run_solo_worker(env, timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return None, out.decode(errors="replace") if isinstance(out, bytes) else str(out)
    return proc.returncode, proc.stdout + proc.stderr


def refused(target: Target, role: str, said: str) -> str:
    """The one line a role without the rights it needs gets (issue 33)."""
    s = target.schema
    return (
        f"PostgreSQL refused {role!r} on schema {s!r} ({said}): as the schema's owner run "
        f"`kombu-alkstore -b URL --schema {s} setup --print --grant {role}` and apply it, "
        "then give this role the transport option setup=False (README: PostgreSQL setup "
        "and least privilege)"
    )


def test_a_role_that_may_not_create_the_schema_is_told_what_to_do(pg_target, role):
    """The default setup=True by a runtime role, the schema not made yet: one line that
    says how to set it up, not CREATE's bare InsufficientPrivilege (a new role has no
    CREATE on the database)."""
    target = as_role(pg_target, role)
    admin(
        pg_target,
        f'REVOKE CREATE ON DATABASE test FROM "{role}"',
        "REVOKE CREATE ON DATABASE test FROM PUBLIC",
    )
    with pytest.raises(ConfigurationError) as info:
        open_store(target.url, schema=target.schema)
    assert str(info.value) == refused(target, role, "permission denied for database test")


# ------------------------------------------------------------------- no rights at all
@pytest.mark.parametrize("setup", [True, False])
def test_role_without_rights_on_the_schema_fails_at_connect(pg_target, role, setup):
    made_by_admin(pg_target)
    target = as_role(pg_target, role)
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as info:
        open_store(target.url, schema=target.schema, setup=setup)
    assert str(info.value) == refused(target, role, f"permission denied for schema {target.schema}")
    # Through kombu: raised at connect, and not a retryable connection error (no loop).
    opts = {"schema": target.schema, "setup": setup}
    with Connection(target.broker_url, transport_options=opts) as conn:
        assert not isinstance(info.value, conn.connection_errors)
        with pytest.raises(ConfigurationError):
            conn.ensure_connection(max_retries=3, interval_start=1, interval_step=1)
    assert time.monotonic() - started < 20


def test_worker_without_rights_on_the_schema_exits_with_the_reason(pg_target, role):
    made_by_admin(pg_target)
    code, output = worker_exit(as_role(pg_target, role), {"setup": False})
    assert code is not None, "the worker hung instead of exiting:\n" + output[-2000:]
    assert code != 0
    last = [ln for ln in output.splitlines() if ln.strip()][-1]
    assert "permission denied for schema" in last and pg_target.schema in last, last


# ------------------------------------------------------ the schema but not its tables
def test_role_with_schema_usage_but_no_table_rights(pg_target, role):
    made_by_admin(pg_target)
    admin(pg_target, f'GRANT USAGE ON SCHEMA "{pg_target.schema}" TO "{role}"')
    target = as_role(pg_target, role)
    # Either way the store reads the schema version first: refused at connect.
    for setup in (True, False):
        with pytest.raises(ConfigurationError) as info:
            open_store(target.url, schema=target.schema, setup=setup)
        assert str(info.value) == refused(target, role, "permission denied for table meta")
    code, output = worker_exit(target, {"setup": False})
    assert code is not None, "the worker hung instead of exiting:\n" + output[-2000:]
    assert code != 0
    assert "permission denied for table" in output.splitlines()[-1]


def test_role_that_may_not_log_in_is_a_clear_connection_error(pg_target):
    name = f"alk_f_{uuid.uuid4().hex[:10]}"
    admin(pg_target, f'CREATE ROLE "{name}" NOLOGIN')
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="not permitted to log in"):
            open_store(as_role(pg_target, name).url, schema=pg_target.schema)
        assert time.monotonic() - started < 20
    finally:
        admin(pg_target, f'DROP ROLE "{name}"')


# --------------------------------------------------------------------- DML only
@pytest.mark.parametrize("setup", [False, True], ids=["setup-off", "setup-on-current"])
def test_dml_only_role_runs_a_worker(pg_target, role, setup):
    made_by_admin(pg_target)
    grant_dml(pg_target, role)
    target = as_role(pg_target, role)
    # No CREATE anywhere: not in the schema, not a new schema.
    with psycopg.connect(target.url, autocommit=True) as conn:
        for ddl in (
            f'CREATE TABLE "{target.schema}".nope (x int)',
            f'CREATE SCHEMA "{target.schema}_x"',
            f'CREATE INDEX ON "{target.schema}".jobs (queue)',
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(ddl)

    app = make_app(target, transport_options={"setup": setup}, task_acks_late=True)
    done = []

    @app.task(shared=False, name="priv.work")
    def work(tag):
        done.append(tag)

    @app.task(shared=False, name="priv.refuse")
    def refuse(tag):
        raise Reject("no", requeue=False)

    with thread_worker(app):
        for i in range(5):
            work.delay(f"t{i}")
        work.apply_async(("later",), countdown=0.5)
        refused = refuse.delay("r")
        wait_for(lambda: len(done) == 6, 30)
        with open_store(target.url, schema=target.schema, setup=False) as store:
            wait_for(lambda: (job := store.get_job(refused.id)) and job.state == "dead", 30)

    with open_store(target.url, schema=target.schema, setup=setup) as store:
        store.sweep()
        assert store.dead_requeue(queue="celery") == 1
        assert store.dead_purge() == 0
        assert store.lease_acquire("__alkstore_scheduler", "me", 5)
        beat_api.schedule("every-minute", "@every 1m", "priv.work", args=["beat"], store=store)
        assert [s.name for s in beat_api.list_schedules(store=store)] == ["every-minute"]
        with store.schedule_tick() as tick:
            tick.due(time.time() + 120)
        assert beat_api.unschedule("every-minute", store=store)
        assert store.lease_release("__alkstore_scheduler", "me")


def test_a_role_assumed_in_the_url_options_holds_for_every_connection(pg_target, role):
    """``options=-c role=…`` in the URL (a login role that assumes its group role, as
    libpq users do) holds on every connection the broker opens: the fast pool and the
    claims connection added ``-c synchronous_commit=off`` in place of the URL's options,
    so publishes worked and every claim got ``permission denied`` (issue 29, defect 10)."""
    made_by_admin(pg_target)
    group = f"{role}_g"
    admin(pg_target, f'CREATE ROLE "{group}" NOLOGIN', f'GRANT "{group}" TO "{role}"')
    admin(pg_target, f'ALTER ROLE "{role}" NOINHERIT')
    try:
        grant_dml(pg_target, group)
        base = as_role(pg_target, role)
        sep = "&" if "?" in base.url else "?"
        target = Target(base.engine, f"{base.url}{sep}options=-c%20role%3D{group}", base.schema)
        app = make_app(target, transport_options={"setup": False}, task_acks_late=True)
        done = []

        @app.task(shared=False, name="priv.assumed")
        def work(tag):
            done.append(tag)

        with thread_worker(app):
            for i in range(5):
                work.delay(i)
            work.apply_async((5,), countdown=0.5)
            wait_for(lambda: len(done) == 6, 30)
        assert sorted(done) == list(range(6))
    finally:
        admin(
            pg_target,
            f'DROP SCHEMA IF EXISTS "{pg_target.schema}" CASCADE',
            f'DROP OWNED BY "{group}"',
            f'DROP ROLE "{group}"',
        )


def test_only_the_offers_tables_owner_vacuums_it_to_reopen_the_handoff(pg_target, role):
    """The lease holder's check of the hand-off's gate (``Store.reopen_handoff``) VACUUMs
    a table past it only as its owner: a runtime role's VACUUM would be skipped by the
    server with a warning, every few seconds for as long as the gate stays closed."""
    made_by_admin(pg_target)
    grant_dml(pg_target, role)
    offers = f'"{pg_target.schema}".offers'
    admin(  # past the gate: pages of deleted rows, never vacuumed
        pg_target,
        f"INSERT INTO {offers} SELECT g, 0, '{{}}', 0 FROM generate_series(1, 3000) g",
        f"DELETE FROM {offers}",
    )
    with open_store(as_role(pg_target, role).url, schema=pg_target.schema, setup=False) as s:
        assert s.reopen_handoff() is False
    with open_store(pg_target.url, schema=pg_target.schema) as store:
        assert store.reopen_handoff() is True
