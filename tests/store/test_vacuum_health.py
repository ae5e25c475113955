"""What an operator sees when the xmin horizon is pinned (issue 35): ``vacuum_health``
names the idle-in-transaction session that keeps the queue's dead rows, VACUUM cannot
remove them while it stays, and can once it ends. A real PostgreSQL; this machine's
server runs with ``autovacuum = off``, which the read reports as it is."""

from __future__ import annotations

import re
import time
from unittest import mock

import psycopg

from kombu_alkstore.store import NewJob
from tests.cli.conftest import run_cli
from tests.helpers import wait_for


def _churn(store, n: int) -> None:
    """n tasks published, claimed and acked: each leaves dead row versions in jobs."""
    store.enqueue_many([NewJob("q", f"job-{i}".encode()) for i in range(n)])
    while deliveries := store.claim(["q"], 500):
        store.ack(deliveries)


def _jobs(health):
    (jobs,) = [t for t in health.tables if t.table == "jobs"]
    return jobs


def test_a_pinned_horizon_is_named_and_keeps_the_dead_rows(pg_target):
    with pg_target.open() as store, psycopg.connect(pg_target.url) as pin:
        pin.execute("SELECT txid_current()")  # holds an XID, then sits idle in transaction
        pid = pin.info.backend_pid
        _churn(store, 300)

        def pinned():
            health = store.vacuum_health(older_than=0)
            mine = [h for h in health.holders if h.kind == "session" and h.holder == str(pid)]
            return health if mine and mine[0].state == "idle in transaction" else None

        health = wait_for(pinned, 10)
        (mine,) = [h for h in health.holders if h.holder == str(pid)]
        assert mine.age >= 0 and mine.xids >= 1
        assert store.vacuum_health(older_than=3600).holders == ()  # not open for an hour

        run_vacuum(pg_target, store)
        stuck = wait_for(lambda: _jobs(store.vacuum_health()).dead >= 300 or None, 15)
        assert stuck
        with psycopg.connect(pg_target.url) as conn:
            autovacuum = conn.execute("SHOW autovacuum").fetchone()[0] == "on"
        assert _jobs(store.vacuum_health()).autovacuum == autovacuum
        assert (store.vacuum_health().autovacuum_off == ()) == autovacuum

        pin.rollback()  # the session ends its transaction: the horizon moves on
        run_vacuum(pg_target, store)
        after = store.vacuum_health(older_than=0)
        assert str(pid) not in {h.holder for h in after.holders}
        assert _jobs(after).dead < 300 and _jobs(after).vacuumed_at is not None


def run_vacuum(target, store) -> None:
    with psycopg.connect(target.url, autocommit=True) as conn:
        conn.execute(f"VACUUM {store.names['jobs']}")


def test_status_names_the_holder_and_the_tables_autovacuum_leaves(pg_target, capsys):
    with pg_target.open() as store, psycopg.connect(pg_target.url) as pin:
        r = run_cli(pg_target, "status")
        assert r.code == 0 and "warning" not in r.out, r.out  # nothing to say yet
        pin.execute("SELECT txid_current()")
        pid = pin.info.backend_pid
        _churn(store, 10_500)
        run_vacuum(pg_target, store)
        wait_for(lambda: _jobs(store.vacuum_health()).dead >= 10_000 or None, 15)
        r = run_cli(pg_target, "status", "--horizon-age", "0")
        assert r.code == 0, r.err
        warnings = [ln for ln in r.out.splitlines() if ln.startswith("warning: ")]
        (held,) = [ln for ln in warnings if f"pid {pid} " in ln]
        assert "idle in transaction" in held and "VACUUM cannot remove" in held
        assert f"pg_terminate_backend({pid})" in held
        off = [ln for ln in warnings if ln.startswith("warning: autovacuum off")]
        assert bool(off) == (not _jobs(store.vacuum_health()).autovacuum)
        if off:
            assert re.search(r"dead rows: (.*, )?jobs \d{2},\d{3}", off[0]), off[0]
        # Under the default age (300 s) this young transaction is not named.
        r = run_cli(pg_target, "status")
        assert f"pid {pid} " not in r.out
        r = run_cli(pg_target, "status", "--horizon-age=-1")
        assert r.code == 2 and "--horizon-age: must be 0 or more" in capsys.readouterr().err


def test_dashboard_and_metrics_show_the_pinned_horizon(pg_target):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.web.conftest import serving

    with serving(pg_target) as live, psycopg.connect(pg_target.url) as pin:
        pin.execute("SELECT txid_current()")
        pid = pin.info.backend_pid
        _churn(live.store, 10_500)
        run_vacuum(pg_target, live.store)
        wait_for(lambda: _jobs(live.store.vacuum_health()).dead >= 10_000 or None, 15)
        time.sleep(0.2)  # the transaction's age becomes measurable
        live.dashboard.sampler.take()
        status, text = live.get("/metrics")
        assert status == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("alkstore_horizon_age_seconds", ())] > 0
        assert samples[("alkstore_horizon_xids", ())] >= 1
        assert samples[("alkstore_table_rows", (("state", "dead"), ("table", "jobs")))] >= 10_000
        autovacuum = samples[("alkstore_table_autovacuum", (("table", "jobs"),))]
        # The page warns once the transaction is old enough (here: at once).
        with mock.patch("kombu_alkstore.present.vacuum.HORIZON_AGE", 0.0):
            live.dashboard.sampler.take()
            status, page = live.get("/")
        assert status == 200
        assert f"session pid {pid} (idle in transaction" in page
        assert ("autovacuum off, dead rows: jobs" in page) == (autovacuum == 0)
        status, page = live.get("/")
        assert f"session pid {pid} " not in page  # under 300 s: not named
