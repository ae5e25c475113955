"""The store's pause switch and the dashboard's reads (``kombu_alkstore.web``): engine
neutral, each one named statement of the engine's ``queries.sql``."""

from __future__ import annotations

from .acts import Actor, ActStatements
from .admin import ANY_DEAD, TOTAL_MINUTE, ClaimStat, DeadFilter, RatePoint
from .options import validate_name
from .values import Job


class DashboardReads(ActStatements):
    """Queue pause and the dashboard's reads, a part of :class:`~.interface.Store`."""

    def pause_queue(self, name: str, actor: Actor | None = None) -> bool:
        """Pause ``name``: claims and hand-offs skip it, publishes still land; kept until
        :meth:`resume_queue` (across restarts). False when it was paused already. With
        ``actor``, the pause is recorded as an act in its transaction (none when it was
        paused already; see :mod:`.acts`)."""
        validate_name(name, "queue name")
        return bool(self._acting("queue_pause", actor, _queue_state("queue_pause", name)))

    def resume_queue(self, name: str, actor: Actor | None = None) -> bool:
        """Resume a paused queue and wake its consumers; False when it was not paused.
        With ``actor``, recorded as an act (none when it was not paused)."""
        validate_name(name, "queue name")
        return bool(self._acting("queue_resume", actor, _queue_state("queue_resume", name)))

    def paused_queues(self) -> dict[str, float]:
        """Paused queue names and when each was paused (epoch seconds)."""
        return {r["queue"]: r["paused_at"] for r in self._all("paused_list")}

    def knows_queue(self, name: str, paused: bool = True) -> bool:
        """Whether ``name`` is a queue this store knows: declared (by a worker or a
        publisher), holding messages or dead letters, or (with ``paused``) paused."""
        if self.queue_exists(name) or (paused and name in self.paused_queues()):
            return True
        return any(
            c.pending + c.delayed + c.processing + c.dead
            for c in self.counts([name])
            if c.queue == name
        )

    def peek(self, queue: str, limit: int = 20) -> list[Job]:
        """The next ``limit`` pending jobs of ``queue`` in claim order (delayed ones too,
        by their priority and due time), without claiming them."""
        return [Job(**r) for r in self._all("peek", {"queue": queue, "limit": int(limit)})]

    def dead_search(
        self,
        where: DeadFilter = ANY_DEAD,
        limit: int = 50,
        before: tuple[float, int] | None = None,
        scan: int | None = None,
    ) -> list[Job]:
        """Dead letters matching ``where``, newest first; ``before`` = ``(died_at, id)``
        of the last one of the previous page. With ``scan``, only the ``scan`` newest dead
        letters (from ``before`` on) are looked at, so a filter no index serves (task name,
        error text) reads a bounded number of rows; :meth:`dead_window` says where the next
        window starts."""
        params = {**where.params(), "limit": int(limit)}
        params["b_at"], params["b_id"] = before if before else (None, None)
        if scan is None:
            return [Job(**r) for r in self._all("dead_search", params)]
        params["scan"] = int(scan)
        return [Job(**r) for r in self._all("dead_search_window", params)]

    def dead_window(self, scan: int, before: tuple[float, int] | None = None) -> tuple | None:
        """``(died_at, id)`` of the last of the ``scan`` newest dead letters from ``before``
        on (the ``before`` of the next window), or None when no more remain after them."""
        b_at, b_id = before if before else (None, None)
        rows = self._all("dead_window", {"b_at": b_at, "b_id": b_id, "scan": int(scan)})
        return (rows[0]["died_at"], rows[0]["id"]) if len(rows) == 2 else None

    def dead_count(self, where: DeadFilter = ANY_DEAD, cap: int | None = None) -> int:
        """How many dead letters match ``where`` (counting stops at ``cap`` when given)."""
        return int(self._value("dead_count", {**where.params(), "cap": cap}) or 0)

    def dead_ids(
        self, where: DeadFilter = ANY_DEAD, after: int = 0, limit: int = 1000
    ) -> list[int]:
        """Ids of the dead letters matching ``where`` above ``after``, ascending: the
        batches of a bulk requeue or purge."""
        params = {**where.params(), "after": int(after), "limit": int(limit)}
        return [int(i) for i in self._column("dead_ids", params)]

    def claim_stats(self) -> list[ClaimStat]:
        """Per queue: claims held (processing jobs) and idle consumers' offers."""
        return [ClaimStat(**r) for r in self._all("claim_stats")]

    def rate_points(self, since: float) -> list[RatePoint]:
        """Per-minute publish and ack counts from ``since`` on, by minute and queue."""
        return [RatePoint(**r) for r in self._all("rates_since", {"since": since})]

    def rate_totals(self) -> list[RatePoint]:
        """Publish and ack totals per queue since the ``rates`` table was made."""
        return [RatePoint(**r) for r in self._all("rates_totals", {"total": TOTAL_MINUTE})]

    def trim_rates(self, older_than: float) -> int:
        """Delete per-minute rate rows before ``older_than`` (totals are kept)."""
        return self._run("rates_trim", {"before": older_than})


def _queue_state(key: str, name: str):
    """The change of a pause or resume: statement ``key``'s rows, as a change of the
    queue's state (no jobs) for the act."""

    def change(run):
        return [{"queue": r["queue"], "n": None, "ids": None} for r in run(key, {"name": name})]

    return change
