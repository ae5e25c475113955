"""One table queue on one store: claim due rows, settle the claimed ones, count them.

The engine packages (``store/postgres/tables.py``, ``store/sqlite/tables.py``) subclass
:class:`TableQueue` with their quoting, their statements (``tables.sql``) and how a
transaction runs on their store; everything else (claim order, attempts, backoff, dead
letters, fences) is here once.

Guarantees: a claim takes due rows (in the queue's group, unprocessed, retry_after passed
or empty, no live lease) in claim order (priority ascending, retry_after, id), leases
them for the visibility timeout and counts one attempt, each row to one claimer. Every
operation on a claimed row (finish, extend, release, delay, dead-letter) is fenced: it
changes the row only while the claim's lease holds and (with an attempt column) no later
claim took it; otherwise the row's id is missing from the returned set. A row whose
attempts are spent is dead-lettered (``spec.dead``) by the next claim, never delivered.
"""

from __future__ import annotations

import abc
import logging
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any

from ..errors import ConfigurationError
from ..store.backoff import retry_wait
from ..store.sqlfile import parse_blocks
from ..store.values import QueueCounts
from .message import RowDelivery, RowError, envelope
from .render import render_for
from .spec import TableSpec

logger = logging.getLogger("kombu_alkstore")

#: ``run(statement, params)``: a statement run in the transaction, its rows as dicts.
Run = Callable[[str, dict[str, Any]], list[dict[str, Any]]]

#: Rows dead-lettered per claim at most (the rest by the next claims).
SPENT_BATCH = 100


class TableQueue(abc.ABC):
    """A table queue on one store (see the module docstring). Thread-safe as its
    store is: every operation is one transaction on a pooled connection."""

    #: The engine's ``tables.sql`` (package, file name).
    sql_file: tuple[str, str]

    def __init__(self, store: Any, spec: TableSpec) -> None:
        self.store = store
        self.spec = spec
        self.sql: dict[str, str] = {}

    # ------------------------------------------------------------ engine hooks
    @abc.abstractmethod
    def quote(self, name: str) -> str:
        """``name`` as an identifier in the engine's SQL (``a.b``: a qualified name)."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[Run]:
        """One transaction on the store's database, yielding a :data:`Run`."""

    def engine_params(self) -> dict[str, Any]:
        """Parameters the engine's statements bind besides the queue's own."""
        return {}

    def reflect_name(self, table: str) -> str:
        """``table`` as the engine's ``columns`` statement takes it (a bound value)."""
        return table

    def columns_of(self, table: str) -> list[str]:
        """The columns of ``table`` (empty when there is no such table)."""
        with self.transaction() as run:
            return [r["name"] for r in run("columns", {"table": self.reflect_name(table)})]

    # ------------------------------------------------------------ start
    def check(self) -> None:
        """Check the mapping against the table and render the statements; a mismatch
        raises :class:`ConfigurationError` in one line naming the column."""
        spec = self.spec
        package, name = self.sql_file
        text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
        self.sql = {"columns": parse_blocks(text)[0]["columns"]}
        have = self.columns_of(spec.table)
        if not have:
            raise ConfigurationError(f"{spec.describe()}: no such table")
        for role, column in spec.columns.items():
            if column not in have:
                raise ConfigurationError(
                    f"{spec.describe()}: column {column!r} (role {role}) is not in the table "
                    f"(its columns: {', '.join(have)})"
                )
        copy: list[str] = []
        if spec.dead.table:
            dead = self.columns_of(spec.dead.table)
            if not dead:
                raise ConfigurationError(f"{spec.describe()}: no dead table {spec.dead.table!r}")
            if spec.columns["id"] not in dead:
                raise ConfigurationError(
                    f"{spec.describe()}: dead table {spec.dead.table!r} lacks the id column "
                    f"{spec.columns['id']!r}"
                )
            copy = [c for c in have if c in dead]
        self.sql = render_for(spec, text, self.quote, copy, f"{package}/{name}")

    # ------------------------------------------------------------ params
    def _params(self, **more: Any) -> dict[str, Any]:
        spec = self.spec
        return {
            "group": spec.group,
            "max_attempts": spec.max_attempts,
            "vt": spec.visibility_timeout,
            "dead_group": spec.dead.group,
            "queue": spec.queue,
            **self.engine_params(),
            **more,
        }

    # ------------------------------------------------------------ claim
    def claim(self, limit: int) -> list[RowDelivery]:
        """Up to ``limit`` due rows, claimed, in claim order; spent ones dead-lettered."""
        spec = self.spec
        with self.transaction() as run:
            if spec.dead.kind != "stay":  # spent rows left in place are passed over
                spent = run("spent", self._params(limit=SPENT_BATCH))
                if spent:
                    self._bury(run, [r["alk_id"] for r in spent])
            rows = run("claim", self._params(limit=limit))
        rows.sort(key=self._order)
        return [self._delivery(r) for r in rows]

    def _order(self, row: dict[str, Any]) -> tuple:
        """Claim order of a returned row (RETURNING keeps none)."""
        key: list[Any] = []
        for role in ("priority", "retry_after"):
            if self.spec.has(role):
                value = row[self.spec.columns[role]]
                key += [value is not None, str(value) if value is not None else ""]
        value = row[self.spec.columns["id"]]
        return (*key, (0, value) if isinstance(value, (int, float)) else (1, str(value)))

    def _delivery(self, row: dict[str, Any]) -> RowDelivery:
        spec = self.spec
        deadline = float(row.pop("alk_deadline"))
        attempt = int(row[spec.columns["attempt"]] or 0) if spec.has("attempt") else 1
        try:
            body = envelope(spec, row, attempt)
        except RowError as exc:  # the channel fails it: delayed, or dead once spent
            logger.error("alkstore: %s row %r: %s", spec.describe(), row[spec.columns["id"]], exc)
            body = b""
        row_id = row[spec.columns["id"]]
        return RowDelivery(
            id=row_id,
            token=random.getrandbits(62),  # a fresh one per claim, as a job's
            queue=spec.queue,
            body=body,
            priority=0,
            attempts=attempt,
            max_attempts=spec.max_attempts if spec.has("attempt") else attempt + 1,
            backoff_base=spec.backoff_base,
            deadline=deadline,
            msg_id=None,
            visibility_timeout=spec.visibility_timeout,
            row_id=row_id,
            fence=attempt if spec.has("attempt") else None,
        )

    def _bury(self, run: Run, ids: list[Any]) -> set[Any]:
        """Dead-letter rows by id (in the caller's transaction, the rows locked)."""
        kind = self.spec.dead.kind
        done: set[Any] = set()
        for row_id in ids:
            if kind == "group":
                got = run("bury_group", self._params(id=row_id))
            elif kind == "table":
                run("bury_copy", self._params(id=row_id))
                got = run("bury_delete", self._params(id=row_id))
            else:
                continue  # stays: the claim passes it over
            done |= {r["alk_id"] for r in got}
        if done:
            logger.warning(
                "alkstore: %s: %d row(s) dead-lettered, their %d attempts spent",
                self.spec.describe(),
                len(done),
                self.spec.max_attempts,
            )
        return done

    # ------------------------------------------------------------ settle
    def _each(self, statement: str, held: Iterable[RowDelivery], **more: Any) -> set[Any]:
        """Run ``statement`` on each held row in one transaction; the ids it changed."""
        held = list(held)
        if not held:
            return set()
        done: set[Any] = set()
        with self.transaction() as run:
            for d in held:
                rows = run(statement, self._params(id=d.row_id, fence=d.fence, **more))
                done |= {r["alk_id"] for r in rows}
        return done

    def finish(self, held: Iterable[RowDelivery]) -> set[Any]:
        """The task ran: mark each row processed (``on_success='mark'``) or delete it."""
        return self._each(f"finish_{self.spec.on_success}", held)

    def extend(self, held: Iterable[RowDelivery], extend: float | None = None) -> set[Any]:
        """Heartbeat: each lease extended to now + ``extend`` (default: the timeout)."""
        return self._each("extend", held, vt=extend or self.spec.visibility_timeout)

    def release(self, held: Iterable[RowDelivery]) -> set[Any]:
        """Hand rows back undelivered: due at once, the attempt refunded."""
        return self._each("release", held)

    def retry(
        self, held: Iterable[RowDelivery], delay: float | None = None, immediate: bool = False
    ) -> set[Any]:
        """A failed attempt: each row delayed (``delay``, else the backoff curve; 0 with
        ``immediate`` after a first attempt), or dead-lettered once its attempts are spent."""
        done: set[Any] = set()
        spent = []
        for d in held:
            if self.spec.has("attempt") and d.attempts >= d.max_attempts:
                spent.append(d)
                continue
            wait = retry_wait(d.attempts, d.backoff_base, delay, immediate)
            done |= self._each("delay", [d], delay=wait)
        if spent:
            done |= self.dead(spent)
        return done

    def dead(self, held: Iterable[RowDelivery]) -> set[Any]:
        """Dead-letter held rows at once (their claims fenced)."""
        held = list(held)
        if self.spec.dead.kind == "stay":
            return self._each("bury_stay", held)
        with self.transaction() as run:
            live = [
                d.row_id for d in held if run("extend", self._params(id=d.row_id, fence=d.fence))
            ]
            return self._bury(run, live)

    # ------------------------------------------------------------ reads
    def _read(self, statement: str, **more: Any) -> dict[str, Any]:
        with self.transaction() as run:
            rows = run(statement, self._params(**more))
        return rows[0] if rows else {}

    def has_due(self) -> bool:
        """Whether a row is due (a spent one to dead-letter included)."""
        return bool(self._read("has_due").get("due"))

    def next_due(self) -> float | None:
        """When the earliest delayed row falls due (database clock), or None."""
        if not self.spec.has("retry_after"):
            return None
        at = self._read("next_due").get("at")
        return float(at) if at is not None else None

    def counts(self) -> QueueCounts:
        """The queue's rows as the operator views count jobs: pending (due), delayed,
        processing (leased), dead (per ``spec.dead``)."""
        spec = self.spec
        row = self._read("counts")
        delayed = int(self._read("delayed").get("n") or 0) if spec.has("retry_after") else 0
        kind = spec.dead.kind
        if kind == "stay":
            dead = int(row.get("spent") or 0)
        else:
            dead = int(self._read(f"dead_{kind}_count").get("n") or 0)
        return QueueCounts(
            queue=spec.queue,
            pending=int(row.get("pending") or 0),
            delayed=delayed,
            processing=int(row.get("processing") or 0),
            dead=dead,
        )
