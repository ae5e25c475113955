"""What ``status`` and the dashboard say when dead rows pile up in the queue tables
(docs/operations.md, "Dead rows and the xmin horizon"): who pins the horizon, and where
autovacuum does not run. Quiet while neither matters."""

from __future__ import annotations

from ..store.health import HorizonHolder, VacuumHealth
from .format import fmt_age

#: A transaction open longer than this is named (seconds): a queue's own are far shorter.
HORIZON_AGE = 300.0
#: Dead rows in one table from which a table without autovacuum is named.
DEAD_ROWS = 10_000


def _holder(h: HorizonHolder) -> str:
    if h.kind == "session":
        who = ", ".join(x for x in (h.state, h.app and f"app {h.app}", h.role) if x)
        return f"session pid {h.holder} ({who}) open for {fmt_age(h.age)}"
    if h.kind == "slot":
        return f"replication slot {h.holder} ({h.state}), {h.xids} transactions behind"
    return f"prepared transaction {h.holder!r} ({h.role}) for {fmt_age(h.age)}"


def vacuum_warnings(
    health: VacuumHealth, horizon_age: float | None = None, dead_rows: int | None = None
) -> list[str]:
    """One line per thing an operator should act on: each holder of the horizon (a
    session's transaction open ``horizon_age`` seconds or longer, default
    :data:`HORIZON_AGE`; any slot or prepared transaction) with what it keeps and how to
    end it, and the tables with ``dead_rows`` (default :data:`DEAD_ROWS`) or more dead
    rows that autovacuum does not clean."""
    horizon_age = HORIZON_AGE if horizon_age is None else horizon_age
    dead_rows = DEAD_ROWS if dead_rows is None else dead_rows
    lines = []
    dead = f"{health.dead_rows:,} dead rows in the queue tables"
    for h in health.holders:
        if h.kind == "session" and (h.age or 0) < horizon_age:
            continue
        fix = (
            f"end it (SELECT pg_terminate_backend({h.holder})) or set "
            "idle_in_transaction_session_timeout"
            if h.kind == "session"
            else "drop or advance it"
            if h.kind == "slot"
            else "COMMIT PREPARED or ROLLBACK PREPARED it"
        )
        lines.append(f"horizon pinned by {_holder(h)}: VACUUM cannot remove {dead}; {fix}")
    idle = [t for t in health.tables if not t.autovacuum and t.dead >= dead_rows]
    if idle:
        names = ", ".join(f"{t.table} {t.dead:,}" for t in idle)
        lines.append(
            f"autovacuum off, dead rows: {names}; run VACUUM on them or turn autovacuum on"
        )
    return lines
