"""Global rate limits: at most N claims of a queue (or of one key within it) in any P
seconds, across every worker (docs/flow-control.md "Rate limits").

A rate lives on the queue's row (migration 0010: ``queues.rate_limits``, a JSON object
``{"": [N, P], "<key>": [N, P], "*": [N, P]}``; ``""`` is the whole queue, ``"*"`` each
key without its own entry). Every claim of a queue with a rate is logged in
``claim_log`` with the database's time while the claim held the queue's lock (PostgreSQL)
or the file's write lock (SQLite); a claim counts the claims logged within each period
before its own time and takes only the room left. So, by that clock, **at most N claims
in any interval (s, s + P]**: the (i + N)-th claim is at least P seconds after the i-th.

The key of a job is its concurrency limit key (``alkstore_limit_key``, see
:mod:`.limits`); a job without a key counts against its queue's rate only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .limits import EVERY_KEY, check_key, parse_keyed
from .options import validate_name
from .rate_values import UNITS, QueueRates, Rate, rates_of
from .statements import Statements

#: "N/UNIT" or "N/<seconds>s" ("5/30s", "2/0.5s").
_SPELLING = re.compile(r"^\s*(\d+)\s*/\s*(?:(\d+(?:\.\d+)?)\s*s|([smhd]))\s*$")
#: The shortest period accepted, in seconds (finer than the database clock's use).
MIN_PERIOD = 0.01
#: The longest period accepted (a week): claims are logged for as long.
MAX_PERIOD = 7 * 86400.0
#: The largest N: the claims of one period are rows of claim_log.
MAX_COUNT = 1_000_000


def parse_rate(value: Any, option: str = "rate") -> Rate:
    """``value`` as a :class:`Rate`: a string ``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``
    or ``"N/<seconds>s"`` (``"5/30s"``), or a :class:`Rate`; refused by ``option``'s name
    in one line otherwise (N below 1 or above a million, a period below 0.01 s or above
    a week, another spelling)."""
    if isinstance(value, Rate):
        return check_rate(value.n, value.per, option)
    match = _SPELLING.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigurationError(
            f"{option} must read N/s, N/m, N/h, N/d or N/<seconds>s (e.g. '10/s', "
            f"'100/m', '5/30s'), got {value!r}"
        )
    count, seconds, unit = match.groups()
    return check_rate(int(count), float(seconds) if seconds else UNITS[unit], option)


def check_rate(n: Any, per: Any, option: str = "rate") -> Rate:
    """``n`` claims per ``per`` seconds as a :class:`Rate`, refused by ``option``'s name
    unless 1 <= n <= :data:`MAX_COUNT` and :data:`MIN_PERIOD` <= per <= :data:`MAX_PERIOD`.
    (No rate of 0: pause the queue, or set its concurrency limit to 0.)"""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT:
        raise ConfigurationError(
            f"{option}: the count must be an integer from 1 to {MAX_COUNT} (to stop claims, "
            f"pause the queue or set its limit to 0), got {n!r}"
        )
    if (
        isinstance(per, bool)
        or not isinstance(per, (int, float))
        or not math.isfinite(per)
        or not MIN_PERIOD <= per <= MAX_PERIOD
    ):
        raise ConfigurationError(
            f"{option}: the period must be {MIN_PERIOD} to {MAX_PERIOD:g} seconds, got {per!r}"
        )
    return Rate(n, float(per))


def parse_rates(raw: Any, option: str = "limits") -> dict[str, dict[str | None, Rate]]:
    """The rates of the ``limits`` transport option: each queue's ``"rate"`` and
    ``"key_rates"`` entries (``{queue: {"rate": "10/s", "key_rates": {"*": "2/s"}}}``)
    as ``{queue: {None: Rate, key: Rate}}``; queues without one are left out. The rest
    of the option is :func:`.limits.parse_limits`' (which checks it)."""
    if not isinstance(raw, Mapping):
        return {}
    parsed: dict[str, dict[str | None, Rate]] = {}
    for queue, spec in raw.items():
        if not isinstance(spec, Mapping):
            continue
        validate_name(queue, f"{option} queue name")
        where = f"{option}[{queue!r}]"
        entry = parse_keyed(spec, "rate", "key_rates", "rates", parse_rate, where)
        if entry:
            parsed[queue] = entry
    return parsed


class RateStatements(Statements):
    """Setting rate limits, a part of :class:`~.interface.Store` (read with the
    concurrency limits by :meth:`~.limits.LimitStatements.limits`)."""

    now: Any  # Store.now (the same Store): the database's clock

    def set_rate(self, queue: str, rate: Rate | str, key: str | None = None) -> Rate:
        """At most ``rate`` claims of ``queue`` (``key``: of that key; ``"*"``: of each
        key without its own rate) from the next claim on; the claims already logged
        within the new period count against it. Returns the rate set."""
        validate_name(queue, "queue name")
        rate = parse_rate(rate)
        check_key(key, "key")
        self._all("rate_set", {"queue": queue, "key": key, "n": rate.n, "per": rate.per})
        return rate

    def clear_rate(self, queue: str, key: str | None = None) -> bool:
        """No rate on ``queue`` (``key``: on that key only) from the next claim on;
        False when the queue has no row. The claims logged for a queue left without any
        rate are forgotten."""
        validate_name(queue, "queue name")
        check_key(key, "key")
        found = bool(self._all("rate_clear", {"queue": queue, "key": key}))
        self._all("rate_forget", {"queue": queue})
        return found

    def apply_rates(self, rates: Mapping[str, Mapping[str | None, Rate]]) -> None:
        """Set the rates :func:`parse_rates` read (the ``limits`` transport option)."""
        for queue, entry in rates.items():
            for key, rate in entry.items():
                self.set_rate(queue, rate, key)

    def claims_logged(self, queue: str) -> list[float]:
        """The times of ``queue``'s claims the rate log still holds (those within its
        longest period, at least), oldest first: what its rates count."""
        validate_name(queue, "queue name")
        return [float(r["at"]) for r in self._all("rate_log_times", {"queue": queue})]

    def rate_use(
        self, queue: str, raw: str | None, wait: float | None = None, throttles: int = 0
    ) -> QueueRates | None:
        """``queue``'s rates (its stored ``rate_limits``, ``raw``, ``rate_wait`` and
        ``rate_throttles``) and
        the claims within each one's period now (``"*"``: the busiest key without a rate
        of its own); None without any rate. One short count per rate."""
        if wait is not None and wait <= self.now():
            wait = None  # a past wait throttles nothing
        rates = rates_of(raw, wait, throttles)
        if rates is None:
            return None
        used = {}
        if rates.rate is not None:
            used[""] = self._count("rate_used_queue", {"queue": queue, "per": rates.rate.per})
        own = [k for k in rates.keys if k != EVERY_KEY]
        for key, rate in rates.keys.items():
            params: dict[str, Any] = {"queue": queue, "per": rate.per, "key": key}
            if key == EVERY_KEY:
                params["own"] = self._array(own)
                used[key] = self._count("rate_used_busiest", params)
            else:
                used[key] = self._count("rate_used_key", params)
        return rates.with_use(used)

    def _count(self, key: str, params: dict[str, Any]) -> int:
        row = self._one(key, params)
        return int(row["used"] or 0) if row else 0


__all__ = [
    "EVERY_KEY",
    "QueueRates",
    "Rate",
    "RateStatements",
    "check_rate",
    "parse_rate",
    "parse_rates",
    "rates_of",
]
