"""Claim floors: claims that start past the dead index entries a pinned horizon keeps.

A claim walks the claim index ``jobs_claim (queue, priority DESC, run_at, id)`` in order.
Each claim (an UPDATE moving ``run_at`` ahead) and each ack (a DELETE) leaves a dead
entry at the head of that order, and while the xmin horizon is pinned (a session idle in
transaction, long readers) VACUUM cannot remove them: a walk from the head visits them
all, its cost growing with every job done (docs/benchmarks.md, "What one claim touches
behind a pinned horizon").

:class:`ClaimFloors` keeps, per process and store, a floor per (queue, priority): the
``run_at`` the last job this process claimed at that priority was due at, less
``claim_floor_margin`` seconds. A claim's candidate scan is then a list of *bands* in
claim order, each one positioned index scan (``due_one``/``due_any`` in queries.sql):
for each priority with a floor, ``priority = p AND run_at >= floor``; between and around
them, the priorities without one from their head. A queue without a floor has one band,
the whole order (the claim as it was).

Guarantees:

* Claim order is kept, except that a job of a floored priority due before its floor is
  not seen until the floor moves below it: the bands are disjoint, in order
  ``priority DESC, run_at, id``, and each walks its range in index order.
* What can land behind a floor, and what finds it:
  - a publish committed late (a transactional publish, a slow insert): its NOTIFY
    carries its ``run_at``, and the store's waiter lowers that queue's floors below it
    (:meth:`lower`) before its wake-up is acted on; a wake-up without a time (a dead
    letter requeued, a queue resumed) drops the queue's floors;
  - a job published with an eta already past: the same NOTIFY;
  - a job another worker's claim locked and then rolled back, a notification missed
    (no waiter, quiet mode, a lost connection), anything else: while the floors' watch
    runs (``lookbehind.py``, a thread of a process with a claim session, started once
    its claims from the head grow slow, :meth:`walked`, :meth:`calm`), every
    ``claim_floor_rescan`` / 2 seconds it looks behind each floor of the queues claimed
    since its last look, from the head of its priority, on a pooled connection, and
    lowers the floors below what it finds (:meth:`behind`, :meth:`looked`); a queue not
    looked behind for ``claim_floor_rescan`` seconds (no watch running; a bare
    ``Store.claim``; a watch that failed) gets a full claim,
    from the head, instead. So such a job waits at most ``claim_floor_rescan`` once
    claimable (plus the time until a claim: a wake-up or the
    safety-net poll, whose due check walks from the head when that full claim is due,
    :meth:`probe`), and the walk over the dead entries before the floors, which grows
    with every job done behind a pinned horizon, does not hold up the claims pipelined
    on the claim session;
  - a waiter (re)starting its LISTEN drops every floor (:meth:`reset`).
  Not behind a floor: a lapsed claim (its ``run_at`` is its deadline, after the due
  time of every job claimed before it lapsed), a heartbeat or a retry (``run_at``
  ahead).
* A floor learnt from a claim never lands above a job announced, nor survives a reset,
  while that claim was in flight (see :class:`Plan`).
* Thread-safe: one lock around the maps; nothing here does I/O. A forked child gets a
  new lock and no floors (the fork may have come while another thread held the lock).
* ``claim_floor_rescan`` 0 disables floors: every claim is the full walk.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..options import StoreOptions

#: The bounds of a band over every priority (``jobs.priority`` is a SMALLINT).
TOP, BOTTOM = 32767, -32768
#: A band without a floor starts at the head of its priorities.
HEAD = float("-inf")


class Plan:
    """One claim's floors in flight: the lowerings and resets heard while it runs cap
    what it learns (:meth:`ClaimFloors.learn`), so a floor learnt from a claim never
    lands above a job announced meanwhile."""

    __slots__ = ("queues", "caps", "void", "full", "__weakref__")

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = frozenset(queues)
        #: It walks some queue from the head (its full claim is due, or it has no floor).
        self.full = False
        #: queue -> the highest floor it may learn (a job announced meanwhile).
        self.caps: dict[str, float] = {}
        #: A reset was heard meanwhile: it learns nothing.
        self.void = False


def bands(floors: Mapping[int, float]) -> list[tuple[int, int, float]]:
    """The bands (highest priority, lowest priority, run_at from) of one queue with
    these floors (priority: run_at), in claim order, covering every priority once."""
    out: list[tuple[int, int, float]] = []
    above = TOP
    for priority in sorted(floors, reverse=True):
        if priority < above:
            out.append((above, priority + 1, HEAD))
        out.append((priority, priority, floors[priority]))
        above = priority - 1
    if above >= BOTTOM:
        out.append((above, BOTTOM, HEAD))
    return out


def band_params(per_queue: Iterable[tuple[str, Mapping[int, float]]]) -> dict[str, Any]:
    """The ``bands`` fragment's parameters (queries.sql) for each queue's floors."""
    return _params((queue, *band) for queue, floors in per_queue for band in bands(floors))


def _params(rows: Iterable[tuple[str, int, int, float]]) -> dict[str, Any]:
    """The ``bands`` fragment's parameters for these (queue, hi, lo, run_from) bands."""
    params: dict[str, list] = {"b_queue": [], "b_hi": [], "b_lo": [], "b_from": []}
    for queue, hi, lo, run_from in rows:
        params["b_queue"].append(queue)
        params["b_hi"].append(hi)
        params["b_lo"].append(lo)
        params["b_from"].append(run_from)
    return params


class ClaimFloors:
    """The claim floors of one store in one process (see the module docstring)."""

    def __init__(
        self,
        margin: float,
        rescan: float,
        clock: Callable[[], float] = time.monotonic,
        watch: bool = False,
        watch_after: float = 0.0,
    ) -> None:
        self.margin = float(margin)
        self.rescan = float(rescan)
        self.enabled = self.rescan > 0
        #: A watch may look behind these floors (``claim_floor_watch``) ...
        self.watch = self.enabled and watch
        #: ... once claims from the head take this long (seconds; 0: from the start).
        self.watch_after = float(watch_after)
        #: A watch looks behind them now: claims note their queues for it (:meth:`behind`).
        self.watched = self.watch and not self.watch_after
        #: Claims from the head in a row that took at least ``watch_after``.
        self._slow = 0
        self._clock = clock
        self._lock = threading.Lock()
        #: queue -> {priority: run_at from}
        self._floors: dict[str, dict[int, float]] = {}
        #: queue -> when (``clock``) its last full claim was bound, or its last look.
        self._full_at: dict[str, float] = {}
        #: The queues claimed since the last look behind the floors (:meth:`behind`).
        self._claimed: set[str] = set()
        #: The claims in flight (a claim that failed is forgotten with its plan).
        self._flying: weakref.WeakSet[Plan] = weakref.WeakSet()
        _ALL.add(self)

    @classmethod
    def of(cls, options: StoreOptions) -> ClaimFloors:
        """The floors a store with these options keeps (``claim_floor_*``)."""
        return cls(
            options.claim_floor_margin,
            options.claim_floor_rescan,
            watch=options.claim_floor_watch,
            watch_after=options.claim_floor_watch_after,
        )

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._floors.clear()
        self._full_at.clear()
        self._claimed = set()
        self._flying = weakref.WeakSet()
        self.watched = self.watch and not self.watch_after  # the parent's watch stayed there
        self._slow = 0

    def plan(self, queues: Sequence[str], peek: bool = False) -> tuple[dict[str, Any], Plan]:
        """The band parameters of a claim of ``queues`` and its :class:`Plan`. A queue
        whose last full claim is ``rescan`` seconds old (or never was) gets the full
        walk now, and that time is noted (not when ``peek``: what a floored claim binds,
        for EXPLAIN; its plan learns nothing)."""
        plan = Plan(queues)
        if not self.enabled:
            return band_params((q, {}) for q in queues), plan
        with self._lock:
            now = self._clock()
            if self.watched and not peek:
                self._claimed.update(queues)
            chosen: list[tuple[str, Mapping[int, float]]] = []
            for queue in queues:
                floors = self._floors.get(queue, {})
                due = self._full_due(queue, now)
                if due and not peek:
                    self._full_at[queue] = now
                    floors = {}
                plan.full = plan.full or not floors
                chosen.append((queue, dict(floors)))
            if not peek:
                self._flying.add(plan)
        return band_params(chosen), plan

    def probe(self, queues: Sequence[str]) -> dict[str, Any]:
        """The band parameters of a read of ``queues`` that only looks (``has_due``,
        ``next_due``): the floors, except from the head for a queue whose full claim is
        due (so what that claim would find behind a floor is seen); notes nothing."""
        if not self.enabled:
            return band_params((q, {}) for q in queues)
        with self._lock:
            now = self._clock()
            chosen = [
                (q, {} if self._full_due(q, now) else dict(self._floors.get(q, {}))) for q in queues
            ]
        return band_params(chosen)

    def _full_due(self, queue: str, now: float) -> bool:
        """Whether ``queue``'s last full claim is ``rescan`` seconds old (or never was);
        the caller holds the lock."""
        return now - self._full_at.get(queue, -self.rescan - 1.0) >= self.rescan

    def behind(self) -> tuple[dict[str, Any], float] | None:
        """What the watch looks behind now: the ``bands`` parameters of one band per
        floor of the queues claimed since the last look (its priority, ``run_from`` the
        floor), and the time (``clock``) of this look, for :meth:`looked`; None if there
        is none. A queue left unclaimed is not looked at (an idle worker sends nothing
        more): its first claim, or due check, after ``rescan`` seconds walks from the
        head itself."""
        with self._lock:
            now = self._clock()
            claimed, self._claimed = self._claimed, set()
            floors = [
                (q, p, p, f)
                for q, fs in self._floors.items()
                if q in claimed
                for p, f in fs.items()
            ]
        return (_params(floors), now) if floors else None

    def looked(
        self, params: Mapping[str, Any], at: float, found: Iterable[tuple[str, float]]
    ) -> None:
        """The watch's look (:meth:`behind` at ``at``) is done: the floors go below each
        job ``found`` (queue, run_at), and the queues looked at need no full claim until
        ``rescan`` seconds after ``at``."""
        for queue, run_at in found:
            self.lower(queue, run_at)
        with self._lock:
            for queue in set(params["b_queue"]):
                self._full_at[queue] = max(self._full_at.get(queue, at), at)

    #: A watch started on slow claims stops after a look that took less than this share
    #: of ``watch_after`` (or had nothing to look at).
    CALM = 0.5
    #: Slow claims from the head in a row that start the watch: one slow claim may be a
    #: hiccup of the client's machine; behind a pin every claim from the head is slow.
    SLOW_IN_A_ROW = 2

    def walked(self, plan: Plan, took: float) -> bool:
        """``plan``'s claim took ``took`` seconds on the server: whether a watch should
        run now. It should (and the floors are watched from then on) once this claim
        walked from the head and it and the claim from the head before it each took at
        least ``watch_after``; and while they are watched (so a claim restarts a watch
        that stopped as it was called for)."""
        if not (plan.full and self.watch):
            return False
        with self._lock:
            if not self.watched:
                self._slow = self._slow + 1 if took >= self.watch_after else 0
                if self._slow >= self.SLOW_IN_A_ROW:
                    self._slow, self.watched = 0, True
            return self.watched

    def calm(self, took: float | None) -> bool:
        """The watch's look took ``took`` seconds (None: there was nothing to look at):
        whether the watch stops now. True (and claims walk from the head again every
        ``rescan``) for a watch started on slow claims whose look took less than
        ``CALM`` × ``watch_after``: the horizon moved on, or VACUUM removed the dead
        entries, or the worker is idle."""
        if not self.watch_after or (took is not None and took >= self.CALM * self.watch_after):
            return False
        with self._lock:
            self.watched = False
            self._claimed = set()
            return True

    def learn(self, plan: Plan, rows: Iterable[Mapping[str, Any]]) -> None:
        """A claim's rows (queue, priority, was_due): each (queue, priority) claimed
        gets the floor of its last job in claim order, ``was_due`` less the margin, or
        lower if a job announced while the claim ran was due earlier."""
        if not self.enabled:
            return
        last: dict[tuple[str, int], float] = {}
        for row in rows:
            if row.get("id") is None or row.get("was_due") is None:
                continue
            key = (row["queue"], int(row["priority"]))
            last[key] = max(last.get(key, HEAD), float(row["was_due"]))
        with self._lock:
            self._flying.discard(plan)
            if plan.void:
                return
            for (queue, priority), was_due in last.items():
                if queue in plan.queues:
                    floor = min(was_due - self.margin, plan.caps.get(queue, was_due))
                    self._floors.setdefault(queue, {})[priority] = floor

    def lower(self, queue: str, run_at: float | None) -> None:
        """A job of ``queue`` due at ``run_at`` was announced (None: at once, time
        unknown): every floor of the queue goes below it, and so does every floor the
        claims in flight will learn (None: the queue's floors are dropped)."""
        with self._lock:
            if run_at is None:
                self._floors.pop(queue, None)
                below = HEAD
            else:
                below = float(run_at) - self.margin
                for priority, floor in (self._floors.get(queue) or {}).items():
                    if floor > below:
                        self._floors[queue][priority] = below
            for plan in self._flying:
                if queue in plan.queues:
                    plan.caps[queue] = min(plan.caps.get(queue, below), below)

    def reset(self) -> None:
        """Drop every floor, and those the claims in flight would learn (a waiter
        (re)started listening: what was announced while none listened is unknown)."""
        with self._lock:
            self._floors.clear()
            for plan in self._flying:
                plan.void = True

    def snapshot(self) -> dict[str, dict[int, float]]:
        """The floors now, by queue and priority (for tests and diagnostics)."""
        with self._lock:
            return {q: dict(f) for q, f in self._floors.items()}


#: Every ClaimFloors of this process: a forked child starts each afresh.
_ALL: weakref.WeakSet[ClaimFloors] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for floors in list(_ALL):
        floors._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
