"""What an operator sees when the xmin horizon is pinned (issue 35): ``vacuum_health``
names the idle-in-transaction session that keeps the queue's dead rows, VACUUM cannot
remove them while it stays, and can once it ends. A real PostgreSQL; this machine's
server runs with ``autovacuum = off``, which the read reports as it is."""

from __future__ import annotations

import psycopg

from tests.helpers import wait_for


def _churn(store, n: int) -> None:
    """n tasks published, claimed and acked: each leaves dead row versions in jobs."""
    for i in range(n):
        store.enqueue("q", f"job-{i}".encode())
    while deliveries := store.claim(["q"], 50):
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
