"""The duplicate storm of issue 14 (defect 0), repeated: three ``--pool threads -c 4``
workers with ``task_acks_late``, default transport options, a burst of 3,000 tasks from
one producer, on a fresh PostgreSQL cluster whose schema and default queue already had a
busy history (workers killed with -9 mid-backlog with 2 s and 5 s visibility timeouts and
countdowns, a poison task, a remote-control shutdown, extra bindings). Eight runs in CI
(``ALKSTORE_STORM_RUNS=20`` for the twenty of the deep run), each with zero tasks executed
twice; a trigger records every change of the jobs table meanwhile,
so a run that ever executes a task twice fails saying how its job got there again.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal

import psycopg
import pytest
from kombu import Exchange, Queue

from tests.helpers import (
    cluster_app,
    kill_group,
    make_app,
    read_record,
    run_sql,
    wait_for,
    worker_process,
)
from tests.private_pg import private_cluster

#: Bursts: 8 in CI (about 100 s); ALKSTORE_STORM_RUNS=20 for the twenty of defect 0's round.
RUNS = int(os.environ.get("ALKSTORE_STORM_RUNS", "8"))
TASKS = 3000


def _history(target, tmp_path) -> None:
    """What earlier Celery tests left in the schema and the default queue."""
    for vt in (2, 5):
        _history_round(target, tmp_path, vt)


def _history_round(target, tmp_path, vt: float) -> None:
    rec = tmp_path / "history.tsv"
    opts = dict(
        target.transport_options, polling_interval=1.0, visibility_timeout=vt, backoff_base=0.2
    )
    app = make_app(target, transport_options=opts)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_ACKS_LATE": "1"}
    for i in range(20):
        app.send_task("tests.apps.proj.mark", (f"h{vt}-{i}", 0.2), countdown=i % 3)
    poison = app.send_task("tests.apps.proj.suicide", (f"p{vt}",))
    killed = tmp_path / "history-killed.log"
    # A node name of its own: a queue of a previous round's node (same name) may still
    # hold that round's shutdown broadcast, as it would on any broker.
    node = ("-c", "2", "-n", f"k{vt}@%h")
    with target.open() as store, worker_process(target, rec, *node, log=killed, **env) as w:

        def poison_dead() -> bool:
            job = store.get_job(poison.id)
            return job is not None and job.state == "dead"

        try:
            wait_for(poison_dead, 180)
        except AssertionError:
            print(killed.read_text()[-4000:])
            raise
        kill_group(w, signal.SIGKILL)
    log = tmp_path / "history.log"
    threads = ("-c", "2", "-P", "threads", "-n", f"sd{vt}@%h")
    with worker_process(target, rec, *threads, log=log, **env) as w:
        done = {f"h{vt}-{i}" for i in range(20)}
        wait_for(lambda: done <= {r[0] for r in read_record(rec)}, 90)
        wait_for(lambda: app.control.inspect(timeout=1).ping(), 60)  # pidbox bound
        app.control.broadcast("shutdown")
        wait_for(lambda: w.poll() is not None, 30)
    with app.connection_for_write() as conn:  # a routing test's extra bindings
        Queue("celery", Exchange("extra", "topic"), routing_key="celery.#")(conn).declare()


# Every row change of the jobs table, kept by a trigger during the bursts: if a burst
# ever runs a task twice, the failure says how its job got to a second worker (re-claimed
# after a lapse, handed back with its attempt refunded, or inserted twice).
AUDIT = """
CREATE TABLE {schema}.audit (op text, old jsonb, new jsonb);
CREATE FUNCTION {schema}.audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {schema}.audit (op, old, new) VALUES (TG_OP,
    CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'body' END,
    CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'body' END);
  RETURN NULL;
END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {schema}.jobs
  FOR EACH ROW EXECUTE FUNCTION {schema}.audit_row();
"""


def _kind(op: str, old: dict | None, new: dict | None) -> str:
    if op == "INSERT":
        return "handed off at insert" if new["state"] == "processing" else "inserted"
    if op == "DELETE":
        return "deleted"
    if (old["state"], new["state"]) == ("pending", "processing"):
        return "claimed"
    if (old["state"], new["state"]) == ("processing", "processing"):
        return "re-claimed after a lapse" if old["token"] != new["token"] else "heartbeat"
    if (old["state"], new["state"]) == ("processing", "pending"):
        return "handed back (refund)" if new["attempts"] < old["attempts"] else "requeued"
    return f"{old['state']} -> {new['state']}"


def _audit(target, task_ids: set[str]) -> dict:
    """How the jobs of ``task_ids`` changed since the last call (then forgotten): the
    count of each kind of change, and how many rows each task had."""
    with psycopg.connect(target.url, autocommit=True) as conn:
        rows = conn.execute(f'SELECT op, old, new FROM "{target.schema}".audit').fetchall()
        conn.execute(f'TRUNCATE "{target.schema}".audit')
    kinds: collections.Counter = collections.Counter()
    rows_of: dict[str, set] = collections.defaultdict(set)
    for op, old, new in rows:
        row = new or old
        if row["msg_id"] in task_ids:
            kinds[_kind(op, old, new)] += 1
            rows_of[row["msg_id"]].add(row["id"])
    return {"changes": dict(kinds), "rows per task": sorted({len(r) for r in rows_of.values()})}


def _storm(target, env, app, tmp_path, run: int) -> tuple[collections.Counter, dict]:
    """One burst: the runs of each task key, and each key's task id."""
    rec = tmp_path / f"storm{run}.tsv"
    procs = []
    ids = {}
    try:
        for n in range(3):
            cm = worker_process(
                target, rec, "-P", "threads", "-c", "4", "-n", f"mc{n}-{run}@%h", **env
            )
            procs.append((cm, cm.__enter__()))
        with app.producer_or_acquire() as producer:
            for i in range(TASKS):
                sent = app.send_task("tests.apps.proj.mark", (f"t{i}",), producer=producer)
                ids[f"t{i}"] = sent.id
        wait_for(lambda: len({r[0] for r in read_record(rec)}) >= TASKS, 120, interval=0.2)
        wait_for(lambda: _drained(target), 10, interval=0.2)
    finally:
        for cm, _ in procs:
            cm.__exit__(None, None, None)
    return collections.Counter(r[0] for r in read_record(rec)), ids


def _drained(target) -> bool:
    with target.open() as store:
        return all(c.pending == c.processing == 0 for c in store.counts(["celery"]))


@pytest.mark.slow
@pytest.mark.timeout(900)  # the history and twenty bursts: about 5 minutes on 2 cores
def test_a_burst_after_a_busy_history_runs_every_task_once(tmp_path):
    with private_cluster() as cluster:
        target, opts, app, _ = cluster_app(cluster)
        _history(target, tmp_path)
        run_sql(target, AUDIT.format(schema=f'"{target.schema}"'))
        _audit(target, set())
        defaults = {"ALKSTORE_TEST_OPTIONS": json.dumps(target.transport_options)}
        env = {**defaults, "ALKSTORE_TEST_ACKS_LATE": "1"}
        producer = make_app(target)  # default transport options, as the workers
        producer.conf.broker_transport_options = dict(target.transport_options)
        duplicated = {}
        for run in range(RUNS):
            counts, ids = _storm(target, env, producer, tmp_path, run)
            assert len(counts) == TASKS
            extra = {k: c for k, c in counts.items() if c > 1}
            audit = _audit(target, {ids[k] for k in extra})
            if extra:
                duplicated[run] = (len(extra), max(extra.values()), audit)
        with contextlib.suppress(Exception):
            producer.close()
        assert duplicated == {}, f"runs with tasks executed more than once: {duplicated}"
