"""Global concurrency limits: at most N jobs of a queue (or of one key within it) claimed
at once across every worker (docs/flow-control.md).

A limit lives in the store, on the queue's row (migration 0007: ``queues.max_claimed``
and ``queues.key_limits``), so every claim of every worker reads the current one: a
limit set, lowered or cleared at run time applies from the next claim on. A claim of a
queue with a limit counts its live claims (state ``processing``, deadline ahead) inside
the claim statement and takes only the room left; a claim of any other queue pays one
primary-key probe.

A job's limit key comes from the message header :data:`KEY_HEADER`
(``alkstore_limit_key``), read from the stored message envelope when it is published
(:func:`limit_key_of`). Per-key limits are a JSON object on the queue's row: a key's
own entry, else the entry :data:`EVERY_KEY` (``"*"``), applies; a job without a key
counts against the queue's limit only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from .options import validate_name
from .rate_values import QueueRates
from .statements import Statements

#: The message header carrying a publish's limit key.
KEY_HEADER = "alkstore_limit_key"
#: The per-key limit entry that applies to every key without its own.
EVERY_KEY = "*"
#: The longest key accepted, in characters (as for unique keys).
MAX_KEY_LENGTH = 512
#: The bytes a stored envelope must contain to carry a limit key (a cheap test first).
_MARK = b'"' + KEY_HEADER.encode() + b'"'


def check_limit(value: Any, option: str = "limit") -> int:
    """``value`` as a concurrency limit: an integer >= 0 (0 stops every claim), refused
    by ``option``'s name otherwise (a bool, a float, a negative number, a string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{option} must be an integer >= 0, got {value!r}")
    if value < 0:
        raise ConfigurationError(f"{option} must be an integer >= 0, got {value!r}")
    if value > 2**31 - 1:
        raise ConfigurationError(f"{option} must be below 2**31, got {value!r}")
    return value


def parse_keyed(
    spec: Mapping[str, Any],
    whole: str,
    per_key: str,
    noun: str,
    parse: Callable[[Any, str], Any],
    where: str,
) -> dict[str | None, Any]:
    """One queue's entry of the ``limits`` option for one kind of limit: ``spec[whole]``
    under ``None`` and each key of ``spec[per_key]`` under its key, each value read by
    ``parse(value, where)``; a bad key, value or map is refused naming its place."""
    entry: dict[str | None, Any] = {}
    if spec.get(whole) is not None:
        entry[None] = parse(spec[whole], f"{where}[{whole!r}]")
    keys = spec.get(per_key) or {}
    if not isinstance(keys, Mapping):
        raise ConfigurationError(f"{where}[{per_key!r}] must map keys to {noun}, got {keys!r}")
    for key, value in keys.items():
        check_key(key, f"{where}[{per_key!r}] key")
        entry[key] = parse(value, f"{where}[{per_key!r}][{key!r}]")
    return entry


def check_key(value: Any, option: str = KEY_HEADER) -> str | None:
    """``value`` as a limit key (None: no key); refused by ``option``'s name unless it is
    a string of 1 to :data:`MAX_KEY_LENGTH` characters without NUL."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{option} must be a string (or None for no key), got {type(value).__name__} {value!r}"
        )
    if not value or len(value) > MAX_KEY_LENGTH or "\x00" in value:
        raise ConfigurationError(
            f"{option} must be 1 to {MAX_KEY_LENGTH} characters without NUL, got {value!r}"
        )
    return value


def limit_key_of(body: bytes | bytearray | memoryview) -> str | None:
    """The limit key of a stored message envelope (kombu's message dict as JSON, its
    ``headers`` plain): the :data:`KEY_HEADER` header, or None. Bodies that do not
    mention the header (every message without one) cost one substring test; a key that
    is not a valid one (see :func:`check_key`) is ignored rather than refused, since the
    publish is already under way; a str key is used as it is."""
    raw = bytes(body)
    if _MARK not in raw:
        return None
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get(KEY_HEADER) if isinstance(headers, dict) else None
    if value is not None and not isinstance(value, str):
        value = str(value)  # e.g. a tenant id given as an integer
    try:
        return check_key(value)
    except ConfigurationError:
        return None


@dataclass(frozen=True)
class QueueLimit:
    """A queue's limits and their use now: ``limit`` (None: no queue-wide one) against
    ``used`` live claims; ``keys`` each per-key limit (``"*"``: every other key) and
    ``keys_used`` the live claims of each key that has any; ``rates`` its rate limits
    and their use (:mod:`.rates`), None without any; ``fair`` its fair shares
    (:mod:`.fair`), None when it is not fair."""

    queue: str
    limit: int | None
    used: int
    keys: dict[str, int] = field(default_factory=dict)
    keys_used: dict[str, int] = field(default_factory=dict)
    rates: QueueRates | None = None
    fair: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``status --json``, the dashboard)."""
        return {
            "queue": self.queue,
            "limit": self.limit,
            "used": self.used,
            "keys": dict(self.keys),
            "keys_used": dict(self.keys_used),
            "rates": None if self.rates is None else self.rates.as_dict(),
            "fair": None if self.fair is None else dict(self.fair),
        }


def parse_limits(raw: Any, option: str = "limits") -> dict[str, dict[str | None, int]]:
    """The ``limits`` transport option: ``{queue: N}`` or ``{queue: {"limit": N,
    "keys": {key: M, "*": M}}}`` as ``{queue: {None: N, key: M}}``; refused by name.
    A queue with only rates (``"rate"``, ``"key_rates"``: :func:`.rates.parse_rates`)
    has an empty entry here."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"{option} must map queue names to a limit, got {type(raw).__name__}"
        )
    parsed: dict[str, dict[str | None, int]] = {}
    for queue, spec in raw.items():
        validate_name(queue, f"{option} queue name")
        where = f"{option}[{queue!r}]"
        if not isinstance(spec, Mapping):
            parsed[queue] = {None: check_limit(spec, where)}
            continue
        unknown = set(spec) - {"limit", "keys", "rate", "key_rates", "fair"}
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown entries {sorted(unknown)}; use 'limit', 'keys', "
                "'rate', 'key_rates' and 'fair'"
            )
        parsed[queue] = parse_keyed(spec, "limit", "keys", "limits", check_limit, where)
    return parsed


class LimitStatements(Statements):
    rate_use: Any  # RateStatements.rate_use (the same Store)

    """Setting and reading concurrency limits, a part of :class:`~.interface.Store`."""

    def set_limit(self, queue: str, limit: int, key: str | None = None) -> None:
        """At most ``limit`` jobs of ``queue`` claimed at once (``key``: of that key;
        ``"*"``: of each key without its own limit), from the next claim on. Claims
        already held above a lowered limit run on; no new one is made until the live
        claims are below it."""
        validate_name(queue, "queue name")
        check_limit(limit)
        check_key(key, "key")
        self._all("limit_set", {"queue": queue, "key": key, "n": limit})

    def clear_limit(self, queue: str, key: str | None = None) -> bool:
        """No limit on ``queue`` (``key``: on that key only) from the next claim on;
        False when the queue has no row (it was never declared nor limited)."""
        validate_name(queue, "queue name")
        check_key(key, "key")
        return bool(self._all("limit_clear", {"queue": queue, "key": key}))

    def apply_limits(self, limits: Mapping[str, Mapping[str | None, int]]) -> None:
        """Set the limits :func:`parse_limits` read (the ``limits`` transport option)."""
        for queue, entry in limits.items():
            for key, n in entry.items():
                self.set_limit(queue, n, key)

    def limits(self) -> list[QueueLimit]:
        """Every queue with a limit or a rate, and its use now (live claims, claims
        within each rate's period), by queue name."""
        keys_used: dict[str, dict[str, int]] = {}
        for r in self._all("limit_keys_used"):
            keys_used.setdefault(r["queue"], {})[r["limit_key"]] = int(r["used"])
        found = []
        for r in self._all("limits_list"):
            keys = json.loads(r["key_limits"]) if r["key_limits"] else {}
            found.append(
                QueueLimit(
                    queue=r["queue"],
                    limit=r["max_claimed"],
                    used=int(r["used"] or 0),
                    keys={str(k): int(v) for k, v in keys.items()},
                    keys_used=keys_used.get(r["queue"], {}),
                    rates=self.rate_use(
                        r["queue"], r["rate_limits"], r["rate_wait"], r["rate_throttles"]
                    ),
                    fair=json.loads(r["fair_shares"]) if r["fair_shares"] else None,
                )
            )
        return found
