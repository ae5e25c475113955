"""Unique keys of jobs: what a key may be and which states of its job hold it.

A job published with a unique key holds that key in its queue while it is live in the
states it counts (see docs/flow-control.md). The database enforces it: one key per
``(queue, unique_key)``, in the partial unique index ``jobs_unique`` (migration 0006;
SQLite) or the table ``unique_keys`` kept by triggers on ``jobs`` (PostgreSQL since
migration 0015, whose ``jobs`` is split into generations since 0017).
Every live job state is one of:

* ``pending``: due, waiting for a worker;
* ``delayed``: waiting for its ETA / countdown (a pending row whose ``run_at`` is ahead);
* ``claimed``: held by a worker (``processing``), until ack, retry or a lapse.

A delayed job becomes pending by the clock alone, with no write an index could follow,
so ``pending`` and ``delayed`` count together or not at all; a job's key can stop
counting only where a write happens, its claim. Hence two state sets: all three (the
default), or ``pending`` and ``delayed`` ("while waiting": the claim clears the key, so a
publish made once the job started is enqueued). Any other set is refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError

#: The message header carrying a publish's unique key.
KEY_HEADER = "alkstore_unique"
#: The message header naming the states that hold the key (default: all of STATES).
STATES_HEADER = "alkstore_unique_states"
#: The live states a key may count, in lifecycle order.
STATES = ("pending", "delayed", "claimed")
#: The longest key accepted, in characters (a longer natural key: hash it first, as
#: :func:`kombu_alkstore.unique.key_for` does).
MAX_KEY_LENGTH = 512


def check_key(value: Any, option: str = KEY_HEADER) -> str | None:
    """``value`` as a unique key (None: no key); refused by ``option``'s name unless it
    is a string of 1 to :data:`MAX_KEY_LENGTH` characters without NUL."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{option} must be a string (or None for no key), got {type(value).__name__} {value!r}"
        )
    if not value:
        raise ConfigurationError(f"{option} must not be empty (None means no key)")
    if len(value) > MAX_KEY_LENGTH:
        raise ConfigurationError(
            f"{option} is {len(value)} characters long; at most {MAX_KEY_LENGTH} are "
            "accepted (hash a longer key, e.g. kombu_alkstore.unique.key_for)"
        )
    if "\x00" in value:
        raise ConfigurationError(f"{option} must not contain a NUL character")
    return value


def claimed_counts(value: Any, option: str = STATES_HEADER) -> bool:
    """Whether the states ``value`` names (a list of names or one comma-separated
    string; None: the default, all of :data:`STATES`) include ``claimed``. Unknown names
    and sets other than all three or ``pending`` + ``delayed`` are refused by
    ``option``'s name."""
    if value is None:
        return True
    if isinstance(value, str):
        names: Iterable[Any] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        names = value
    else:
        raise ConfigurationError(
            f"{option} must be a list of state names {list(STATES)}, got {value!r}"
        )
    chosen = set()
    for name in names:
        if not isinstance(name, str) or name not in STATES:
            raise ConfigurationError(
                f"{option}: unknown state {name!r}; the states are {', '.join(STATES)}"
            )
        chosen.add(name)
    if chosen == set(STATES):
        return True
    if chosen == {"pending", "delayed"}:
        return False
    raise ConfigurationError(
        f"{option} must be all of pending, delayed, claimed (the default) or pending and "
        f"delayed, got {sorted(chosen)}: a delayed job becomes pending with no write, and "
        "a job can stop holding its key only when it is claimed (docs/flow-control.md)"
    )
