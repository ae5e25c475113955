"""The planner's view of the queue tables, kept current by the maintenance lease holder.

PostgreSQL plans a prepared statement (and each statement inside a PL/pgSQL function)
once, generically, and keeps that plan until the table's statistics change. A worker
prepares its statements when it starts, often on an empty ``jobs``; a burst of jobs
later, with autovacuum off or not yet round to the table, a plan that chose a wrong
index on the small table walks every job of a queue. A concurrency-limited claim
counted its queue's claims through the claim index: 13 ms a claim beside 100,000
delayed jobs instead of 0.8 (docs/benchmarks.md, "Plans made on an empty jobs table").
Statistics gathered anew make every session plan again, on the table as it is.
On an engine that plans without the table's size (SQLite) there is nothing to do.
"""

from __future__ import annotations

from .statements import Statements


class PlannerStats(Statements):
    """:meth:`refresh_statistics`, a part of :class:`~.interface.Store`."""

    def refresh_statistics(self) -> bool:
        """Gather the planner's statistics of ``jobs`` anew if it has grown to four times
        its size when they were last gathered (and past 2 MB), so that every session's
        plans are made again on the table as it is now; True when it did. Cheap when
        nothing grew (one catalog read). The maintenance lease holder calls it each
        round; a role that does not own the table is skipped by the server (a warning)."""
        if not self._value("jobs_grown"):
            return False
        self._run("jobs_analyze")
        return True
