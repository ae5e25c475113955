"""Rotation of ``jobs``' generations, run by the maintenance lease holder.

Behind a pinned xmin horizon (an idle transaction, a long report) VACUUM removes no
dead row version, and every task leaves about two in ``jobs``. Where the engine keeps
``jobs`` in generations (PostgreSQL since schema version 17: four, a row's generation
the server's clock in two-second periods), a rotation empties the oldest one with a
TRUNCATE, which frees its dead rows whatever the horizon: its live rows are copied
forward first, with their ids, in the same transaction, so nothing is lost and no
claim, ack or heartbeat by id notices. The dead rows are then bounded by about eight
seconds of traffic (docs/architecture.md, "Dead rows behind a pinned horizon").
An engine that keeps no old row versions for readers (SQLite) has nothing to rotate.

The same thread reopens the hand-off after a pin (:meth:`reopen_handoff`): behind it
the offers table grows past its gate and publishes stop handing jobs off; nothing else
would VACUUM it soon, as its registers then only withdraw (no new dead rows for
autovacuum's threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

from .statements import Statements

#: A generation holding more live rows than this (a backlog, delayed jobs) is not
#: rotated: copying them forward every rotation would cost more than the dead rows it
#: frees, and holds the generation's lock, which claims wait for, meanwhile.
ROTATION_CAP = 2_000
#: A generation of at most this many bytes (a page: a few live jobs, such as delayed
#: ones on an idle store) is not rotated: its TRUNCATE would free next to nothing and
#: makes every session plan its statements again. While every generation is that small
#: the store is idle (the rotator waits longer).
ROTATION_SMALL = 8_192


@dataclass(frozen=True)
class Rotation:
    """What one rotation did. ``outcome``: ``rotated`` (the oldest generation emptied,
    ``moved`` live rows copied forward), ``empty`` (it was small: at most
    ``small_bytes``), ``idle`` (every generation was), ``busy`` (its lock was not had at
    once: a transaction holds it), ``kept`` (over :data:`ROTATION_CAP` live rows) or
    ``off`` (the engine keeps no generations)."""

    outcome: str
    moved: int

    @property
    def idle(self) -> bool:
        """Nothing to rotate now nor soon: no generation holds more than a few rows, or
        there are no generations."""
        return self.outcome in ("idle", "off")


class GenerationRotation(Statements):
    """:meth:`rotate_generation` and :meth:`reopen_handoff`, parts of
    :class:`~.interface.Store`."""

    def rotate_generation(
        self, cap: int = ROTATION_CAP, small_bytes: int = ROTATION_SMALL
    ) -> Rotation:
        """Empty the oldest generation of ``jobs`` if it holds more than ``small_bytes`` bytes,
        can be locked at once and holds at most ``cap`` live rows, copying them into the
        current one first (one transaction; nothing is lost whatever it returns). Safe to
        call from any number of processes: each call rotates at most the one generation
        the clock names."""
        for name, value in (("cap", cap), ("small_bytes", small_bytes)):
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")
        row = self._one("rotate_generation", {"cap": cap, "small_bytes": small_bytes})
        assert row is not None
        return Rotation(str(row["outcome"]), int(row["moved"]))

    def reopen_handoff(self) -> bool:
        """VACUUM the offers table if it is past the hand-off's gate (PostgreSQL's
        ``offers_open``: behind a pinned horizon its dead versions pile up and publishes
        stop reading it); True when it ran one. Once the horizon has moved on, that VACUUM
        removes them and truncates the emptied table, so the hand-off resumes; behind a
        pin it frees nothing and costs a scan of a few pages. Skipped while the table's
        lock is held; never run by a role that does not own the table (autovacuum's to
        do then). An engine without the gate never runs one."""
        if not self._value("offers_closed"):
            return False
        self._run("offers_vacuum")
        return True
