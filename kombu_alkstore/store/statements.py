"""How the shared store code runs an engine's SQL: by statement name.

Every engine keeps its SQL in named statements (``.sql`` files, see :mod:`.sqlfile`)
and runs them through :class:`Statements`' primitives; every row comes back as a
mapping by column name. :data:`STATEMENTS` are the names the shared code runs, so every
engine's ``queries.sql`` defines them (checked when a store opens).
"""

from __future__ import annotations

import abc
from typing import Any

from .values import Row

#: The statements the base class runs by name: every engine's ``.sql`` defines them
#: (checked when a store opens, see :func:`.sqlfile.load_queries`).
STATEMENTS = frozenset(
    [
        "size",
        "limit_set",
        "limit_clear",
        "limits_list",
        "limit_keys_used",
        "rate_set",
        "rate_clear",
        "rate_forget",
        "rate_used_queue",
        "rate_used_key",
        "rate_used_busiest",
        "rate_log_times",
        "fair_set",
        "fair_clear",
        "fair_get",
        "revoke",
        "revoked_among",
        "scheduled",
        "dead_explain",
        "get_job_by_id",
        "get_job_by_msg",
        "purge",
        "queue_pause",
        "queue_resume",
        "paused_list",
        "peek",
        "dead_search",
        "dead_search_window",
        "dead_window",
        "dead_count",
        "dead_ids",
        "claim_stats",
        "horizon_holders",
        "table_health",
        "jobs_grown",
        "jobs_analyze",
        "rotate_generation",
        "offers_closed",
        "offers_vacuum",
        "rates_since",
        "rates_totals",
        "rates_trim",
        "exchange_type",
        "bindings",
        "routing_version",
        "queue_declare",
        "queue_exists",
        "lease_acquire",
        "lease_release",
        "lease_holder",
        "schedule_upsert",
        "schedule_delete",
        "schedule_list",
        "schedule_get",
        "schedule_clock",
        "schedule_run_now",
        "schedule_disable",
        "schedule_enable",
        "schedule_due",
        "schedule_advance",
        "schedule_skip",
        "schedule_skip_busy",
        "schedule_set_job",
        "schedule_job_floor",
        "schedule_job_since",
        "schedule_job_live",
        "schedule_ran_now",
        "schedule_failed",
        "schedule_savepoint",
        "schedule_savepoint_undo",
        "schedule_savepoint_release",
        "unique_holder",
    ]
)


class Statements(abc.ABC):
    """The statement primitives an engine implements (``_all``, ``_one``, ``_run``) and
    the helpers built on them; the base of :class:`~.interface.Store` and of its parts."""

    @abc.abstractmethod
    def _all(self, key: str, params: dict[str, Any] | None = None) -> list[Row]:
        """Run the engine's statement ``key``; all rows."""

    @abc.abstractmethod
    def _one(self, key: str, params: dict[str, Any] | None = None) -> Row | None:
        """Run the engine's statement ``key``; the first row or None."""

    @abc.abstractmethod
    def _run(self, key: str, params: dict[str, Any] | None = None) -> int:
        """Run the engine's statement ``key``; the row count."""

    def _value(self, key: str, params: dict[str, Any] | None = None) -> Any:
        """The single column of the first row of statement ``key``, or None."""
        row = self._one(key, params)
        return None if row is None else next(iter(row.values()))

    def _column(self, key: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The single column of every row of statement ``key``."""
        return [next(iter(r.values())) for r in self._all(key, params)]

    @staticmethod
    def _array(values: list[Any]) -> Any:
        """A list as the engine binds it (PostgreSQL: an array; SQLite: JSON text)."""
        return values
