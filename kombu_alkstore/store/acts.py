"""Operator acts on record: each act of a person on the store, kept in the ``acts`` table.

An act is a queue paused, resumed or purged, or dead letters requeued, moved or purged,
done through a store method given an :class:`Actor` (who, and why). The store writes the
act **in the same transaction as the change**: the change and its act commit together or
not at all. Guarantees:

* an act that changes nothing (no job purged, a queue paused already) writes no act;
* one act row per queue the change touched: how many jobs (``job_count``) and their
  first :data:`ACT_IDS_CAP` ids, ascending; a pause or resume names its queue and no jobs;
* no message body, argument or header is copied into an act;
* ``at`` is the database's clock (a column default: no statement binds it);
* ``actor`` and ``reason`` are codes, not content: at most :data:`MAX_ACT_TEXT`
  characters, no line breaks (the table refuses others) nor other control characters
  (:class:`Actor` refuses those too);
* the table refuses UPDATE and DELETE (PostgreSQL: TRUNCATE too), whoever sends them,
  except the retention trim (:meth:`ActStatements.trim_acts`), which deletes only rows
  older than the retention it declares in its own transaction (migration 0008).

The engines' SQL is in ``acts.sql`` next to their ``queries.sql``; see
docs/operations.md, "Acts on record".
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .options import validate_name
from .statements import Statements
from .values import Row

#: Job ids an act keeps at most (the first, ascending); ``job_count`` has them all.
ACT_IDS_CAP = 100
#: The most characters of an actor or a reason.
MAX_ACT_TEXT = 200
#: The acts a store records, by name.
ACT_NAMES = (
    "queue_pause",
    "queue_resume",
    "queue_purge",
    "dead_requeue",
    "dead_move",
    "dead_purge",
)
#: Statements every engine's ``acts.sql`` defines.
ACT_STATEMENTS = frozenset(["act_insert", "acts_list", "acts_trim_allow", "acts_trim"])

#: Runs one named statement in the open transaction; all its rows ([] when none).
Run = Callable[[str, "dict[str, Any] | None"], list[Row]]


def _code(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"an act's {what} must be a non-empty text, got {value!r}")
    if len(value) > MAX_ACT_TEXT or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigurationError(
            f"an act's {what} is a code, not content: at most {MAX_ACT_TEXT} characters, "
            f"no line break or control character, got {value[:40]!r}"
            f"{'…' if len(value) > 40 else ''}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts, and why: ``by`` (an operator's name, ``web:alice``), ``reason`` (a
    code such as ``ticket-4711``, or None). :meth:`checked` refuses what the table would."""

    by: str
    reason: str | None = None

    def checked(self) -> Actor:
        """This actor, or ConfigurationError naming what is wrong."""
        _code(self.by, "actor (--by)")
        if self.reason is not None:
            _code(self.reason, "reason (--reason)")
        return self


@dataclass(frozen=True, slots=True)
class Changed:
    """What one change did to one queue: how many jobs (None: a queue's state, not its
    jobs) and the first :data:`ACT_IDS_CAP` of their ids, ascending."""

    queue: str | None
    count: int | None
    ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Act:
    """One act as the ``acts`` table keeps it (``at``: epoch seconds, the database's
    clock; ``ids``: the first of ``count`` job ids; ``target``: a move's destination)."""

    id: int
    at: float
    act: str
    actor: str
    reason: str | None
    queue: str | None
    target: str | None
    count: int | None
    ids: tuple[int, ...]

    @property
    def ids_left_out(self) -> int:
        """How many job ids the act counts but does not list (beyond the cap)."""
        return max(0, (self.count or 0) - len(self.ids))

    def as_dict(self) -> dict[str, Any]:
        """The act as JSON-ready values (``ids_left_out`` included)."""
        return {
            "id": self.id,
            "at": self.at,
            "act": self.act,
            "by": self.actor,
            "reason": self.reason,
            "queue": self.queue,
            "target": self.target,
            "count": self.count,
            "ids": list(self.ids),
            "ids_left_out": self.ids_left_out,
        }


@dataclass(frozen=True, slots=True)
class ActFilter:
    """Which acts a listing shows (all given parts): exact queue, actor and act name,
    ``since`` epoch seconds (included), ``before_id`` (the last id of the previous page)."""

    queue: str | None = None
    by: str | None = None
    act: str | None = None
    since: float | None = None
    before_id: int | None = None

    def params(self) -> dict[str, Any]:
        """The bound parameters of ``acts_list``."""
        if self.act is not None and self.act not in ACT_NAMES:
            raise ConfigurationError(f"unknown act {self.act!r}: one of {', '.join(ACT_NAMES)}")
        if self.queue is not None:
            validate_name(self.queue, "queue name")
        return {
            "queue": self.queue or None,
            "actor": self.by or None,
            "act": self.act or None,
            "since": self.since,
            "before_id": self.before_id,
        }


def changed_groups(rows: Sequence[Row], cap: int = ACT_IDS_CAP) -> list[Changed]:
    """A change's rows as one :class:`Changed` per queue. Rows an engine grouped already
    (``queue``, ``n``, ``ids``: PostgreSQL aggregates in the statement) are taken as they
    are; rows of changed jobs (``id``, ``queue``) are grouped here."""
    if rows and "n" in rows[0]:
        return [
            Changed(
                r["queue"],
                None if r["n"] is None else int(r["n"]),
                None if r["ids"] is None else tuple(sorted(_ids(r["ids"]))),
            )
            for r in rows
        ]
    by_queue: dict[str, list[int]] = {}
    for r in rows:
        by_queue.setdefault(r["queue"], []).append(int(r["id"]))
    return [Changed(q, len(ids), tuple(sorted(ids)[:cap])) for q, ids in sorted(by_queue.items())]


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # SQLite keeps them as a JSON array
        value = json.loads(value)
    return tuple(int(i) for i in value)


class ActStatements(Statements):
    """The acts table, a part of :class:`~.interface.Store`: writing an act with its
    change (:meth:`_acting`), listing (:meth:`acts`) and the retention trim."""

    @abc.abstractmethod
    def _transaction(self) -> AbstractContextManager[Run]:
        """One transaction (the caller's, when a connection is bound): yields a function
        running a named statement in it and returning all its rows; commits on leaving,
        rolls back on an exception."""

    def _acting(
        self,
        name: str,
        actor: Actor | None,
        change: Callable[[Run], list[Row]],
        target: str | None = None,
    ) -> list[Changed]:
        """Run ``change`` (statements returning what they changed) and, when ``actor``
        is given, record the act ``name`` for each queue changed, in one transaction.
        Nothing changed: no act. Returns what changed."""
        if actor is not None:
            actor = actor.checked()
        with self._transaction() as run:
            groups = changed_groups(change(run))
            if actor is not None:
                for g in groups:
                    if g.count == 0:
                        continue
                    run("act_insert", self._act_params(name, actor, g, target))
        return groups

    def _act_params(
        self, name: str, actor: Actor, g: Changed, target: str | None
    ) -> dict[str, Any]:
        return {
            "act": name,
            "actor": actor.by,
            "reason": actor.reason,
            "queue": g.queue,
            "target": target,
            "job_count": g.count,
            "job_ids": None if g.ids is None else self._array(list(g.ids[:ACT_IDS_CAP])),
        }

    def acts(self, where: ActFilter | None = None, limit: int = 100) -> list[Act]:
        """Acts matching ``where``, newest first, at most ``limit``."""
        params = {**(where or ActFilter()).params(), "limit": int(limit)}
        return [
            Act(
                id=r["id"],
                at=r["at"],
                act=r["act"],
                actor=r["actor"],
                reason=r["reason"],
                queue=r["queue"],
                target=r["target"],
                count=r["job_count"],
                ids=_ids(r["job_ids"]),
            )
            for r in self._all("acts_list", params)
        ]

    def trim_acts(self, retention: float | None = None, batch: int = 10_000) -> int:
        """Delete acts older than ``retention`` seconds (default: the store option
        ``acts_retention``; None keeps every act), ``batch`` rows per transaction; how many
        were deleted. The only DELETE the table admits: each transaction first declares
        the retention (``acts_trim_allow``), and the table's trigger admits the delete of a
        row only when it is older than that."""
        if retention is None:
            retention = self.options.acts_retention  # type: ignore[attr-defined]
        if retention is None:
            return 0
        if (
            isinstance(retention, bool)
            or not isinstance(retention, (int, float))
            or not 0 < retention < math.inf  # NaN too: it would admit every delete
        ):
            raise ConfigurationError(f"acts retention must be a number > 0, got {retention!r}")
        total = 0
        while True:
            with self._transaction() as run:
                run("acts_trim_allow", {"retention": float(retention)})
                gone = len(run("acts_trim", {"retention": float(retention), "batch": batch}))
            total += gone
            if gone < batch:
                return total
