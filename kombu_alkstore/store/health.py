"""What keeps dead rows in the queue tables: the store's read for ``status``, the
dashboard and ``/metrics`` (docs/operations.md, "Dead rows and the xmin horizon").

A queue deletes a row per task and updates it per claim and heartbeat; each change leaves
a dead row version that VACUUM removes only once no open transaction of the database may
still see it. One long transaction, an idle-in-transaction session, a replication slot or
a prepared transaction pins that horizon, and every claim then walks more dead versions.
This read names what pins it and how many dead rows each table holds. On an engine that
keeps no old row versions (SQLite) both lists are empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from .statements import Statements


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """One thing keeping old row versions alive: a ``session`` (its pid) with a
    transaction open for ``age`` seconds, a replication ``slot`` or a ``prepared``
    transaction; ``xids``: how many transaction ids old its horizon is."""

    kind: str
    holder: str
    state: str | None
    app: str | None
    role: str | None
    age: float | None
    xids: int | None


@dataclass(frozen=True, slots=True)
class TableHealth:
    """One store table: live and dead row estimates (the server's statistics, updated
    within a second or so of each change), size in bytes, when it was last vacuumed (epoch
    seconds, None: never) and whether autovacuum may run on it."""

    table: str
    live: int
    dead: int
    bytes: int
    vacuumed_at: float | None
    autovacuum: bool


@dataclass(frozen=True, slots=True)
class VacuumHealth:
    """What pins the horizon (oldest first) and the store's tables (most dead rows
    first)."""

    holders: tuple[HorizonHolder, ...]
    tables: tuple[TableHealth, ...]

    @property
    def autovacuum_off(self) -> tuple[str, ...]:
        """Tables autovacuum does not clean (the server's setting or the table's)."""
        return tuple(t.table for t in self.tables if not t.autovacuum)

    @property
    def dead_rows(self) -> int:
        return sum(t.dead for t in self.tables)


class HealthReads(Statements):
    """:meth:`vacuum_health`, a part of :class:`~.interface.Store`."""

    def vacuum_health(self, older_than: float = 60.0, limit: int = 5) -> VacuumHealth:
        """Transactions open longer than ``older_than`` seconds (and every replication slot
        or prepared transaction holding an xmin) that keep dead rows from being removed, at
        most ``limit`` of them, oldest first; and the dead rows of the store's tables.

        Another role's sessions show only to a role with ``pg_read_all_stats`` (e.g.
        ``pg_monitor``) on PostgreSQL."""
        if not older_than >= 0:
            raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
        tables = self.tables.all()
        holders = self._all("horizon_holders", {"older_than": older_than, "limit": int(limit)})
        health = self._all(
            "table_health",
            {"schema": tables[0].schema or "", "tables": [t.name for t in tables]},
        )
        return VacuumHealth(
            tuple(HorizonHolder(**r) for r in holders), tuple(TableHealth(**r) for r in health)
        )
