"""The ``tables`` transport option: a table of the service's own read as a Celery queue.

``broker_transport_options={"tables": {queue: {...}}}`` maps each queue name (what
``celery worker -Q queue`` consumes) to a table, the roles its columns play and the
Celery task each row is delivered as (docs/tables.md). :func:`parse_tables` checks the
option's shape only; the table itself is checked against it when a connection opens
(:meth:`kombu_alkstore.tables.queue.TableQueue.check`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError

#: The roles a column may play; ``id`` is required, ``locked_until`` too (the lease a
#: worker's claim holds), every other role is optional.
ROLES = (
    "id",
    "group",
    "priority",
    "partition_key",
    "retry_after",
    "attempt",
    "processed_at",
    "locked_until",
    "headers",
    "payload",
)
REQUIRED_ROLES = ("id", "locked_until")
MODES = ("payload", "row")
ON_SUCCESS = ("mark", "delete")

_KEYS = frozenset(
    {
        "table",
        "task",
        "mode",
        "columns",
        "group",
        "max_attempts",
        "visibility_timeout",
        "backoff_base",
        "on_success",
        "dead",
    }
)


@dataclass(frozen=True)
class DeadLetter:
    """Where a row whose attempts are spent goes: another ``group`` value of the same
    table, another ``table`` (the row moved, the columns both tables have copied), or,
    with neither, nowhere: it stays in its table, unprocessed, and is claimed no more."""

    group: Any = None
    table: str | None = None

    @property
    def kind(self) -> str:
        """``group``, ``table`` or ``stay``."""
        return "group" if self.group is not None else "table" if self.table else "stay"


@dataclass(frozen=True)
class TableSpec:
    """One table queue, as configured (checked for shape; see the module docstring)."""

    queue: str
    table: str
    task: str
    mode: str
    #: role -> column name, only the roles the table has.
    columns: dict[str, str]
    #: The value of the group column this queue reads (default: the queue's name).
    group: Any = None
    max_attempts: int = 3
    visibility_timeout: float = 300.0
    #: Seconds: the backoff after a failed attempt is drawn around ``base * 2**(n-1)``.
    backoff_base: float = 2.0
    on_success: str = "mark"
    dead: DeadLetter = field(default_factory=DeadLetter)

    def has(self, role: str) -> bool:
        return role in self.columns

    def describe(self) -> str:
        """How a message names this queue: ``table queue 'emails' (table email_jobs)``."""
        return f"table queue {self.queue!r} (table {self.table})"


def _fail(queue: str, what: str) -> ConfigurationError:
    return ConfigurationError(f"transport option tables[{queue!r}]: {what}")


def _positive(queue: str, name: str, value: Any, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive, finite number"
        raise _fail(queue, f"{name} must be {kind}, got {value!r}")
    return value


def _name(queue: str, what: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(queue, f"{what} must be a non-empty name, got {value!r}")
    return value


def parse_table(queue: str, raw: Any) -> TableSpec:
    """One queue's mapping, checked for shape; a bad one raises naming the key."""
    if not isinstance(raw, dict):
        raise _fail(queue, f"must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise _fail(queue, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    columns = raw.get("columns")
    if not isinstance(columns, dict):
        raise _fail(queue, "columns must map roles to column names")
    for role, column in columns.items():
        if role not in ROLES:
            raise _fail(queue, f"unknown column role {role!r} (roles: {', '.join(ROLES)})")
        _name(queue, f"columns[{role!r}]", column)
    seen: dict[str, str] = {}
    for role, column in columns.items():
        if column in seen:
            raise _fail(queue, f"column {column!r} plays two roles ({seen[column]}, {role})")
        seen[column] = role
    if "group" in raw and "group" not in columns:
        raise _fail(queue, "group needs a 'group' column role")
    for role in REQUIRED_ROLES:
        if role not in columns:
            raise _fail(queue, f"columns needs the {role!r} role")
    mode = raw.get("mode", "payload" if "payload" in columns else "row")
    if mode not in MODES:
        raise _fail(queue, f"mode must be one of {MODES}, got {mode!r}")
    if mode == "payload" and "payload" not in columns:
        raise _fail(queue, "mode 'payload' needs a 'payload' column role")
    on_success = raw.get("on_success", "mark" if "processed_at" in columns else "delete")
    if on_success not in ON_SUCCESS:
        raise _fail(queue, f"on_success must be one of {ON_SUCCESS}, got {on_success!r}")
    if on_success == "mark" and "processed_at" not in columns:
        raise _fail(queue, "on_success 'mark' needs a 'processed_at' column role")
    dead_raw = raw.get("dead") or {}
    if not isinstance(dead_raw, dict) or set(dead_raw) - {"group", "table"} or len(dead_raw) > 1:
        raise _fail(
            queue, f"dead must be {{'group': value}} or {{'table': name}}, got {dead_raw!r}"
        )
    dead = DeadLetter(
        group=dead_raw.get("group"),
        table=_name(queue, "dead.table", dead_raw["table"]) if "table" in dead_raw else None,
    )
    if dead.kind == "group" and "group" not in columns:
        raise _fail(queue, "dead {'group': ...} needs a 'group' column role")
    if dead.kind != "stay" and "attempt" not in columns:
        raise _fail(queue, "dead-lettering needs an 'attempt' column role (the attempt budget)")
    spec = TableSpec(
        queue=queue,
        table=_name(queue, "table", raw.get("table")),
        task=_name(queue, "task", raw.get("task")),
        mode=mode,
        columns=dict(columns),
        group=raw.get("group", queue) if "group" in columns else None,
        max_attempts=_positive(queue, "max_attempts", raw.get("max_attempts", 3), integer=True),
        visibility_timeout=float(
            _positive(queue, "visibility_timeout", raw.get("visibility_timeout", 300.0))
        ),
        backoff_base=float(_positive(queue, "backoff_base", raw.get("backoff_base", 2.0))),
        on_success=on_success,
        dead=dead,
    )
    if dead.kind == "group" and dead.group == spec.group:
        raise _fail(queue, "dead.group must differ from the queue's own group")
    return spec


def parse_tables(raw: Any) -> tuple[TableSpec, ...]:
    """The ``tables`` transport option: ``{queue: mapping}``, each checked for shape."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigurationError(
            f"transport option tables must map queue names to tables, got {type(raw).__name__}"
        )
    return tuple(parse_table(_name("?", "a queue name", q), spec) for q, spec in raw.items())
