"""A rate limit and its use, as the store reads them (no store code: :mod:`.limits`
and :mod:`.rates` both use these)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Seconds per unit of a rate's spelling ("10/s", "100/m", "1000/h", "5000/d").
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Rate:
    """At most ``n`` claims in any ``per`` seconds (``n`` >= 1, ``per`` > 0)."""

    n: int
    per: float

    def __str__(self) -> str:
        for unit, seconds in UNITS.items():
            if self.per == seconds:
                return f"{self.n}/{unit}"
        return f"{self.n}/{self.per:g}s"


@dataclass(frozen=True)
class QueueRates:
    """A queue's rates and their use now: ``rate`` (None: no queue-wide one) against
    ``used`` claims within its period; ``keys`` each per-key rate (``"*"``: every other
    key) and ``keys_used`` the claims within each one's period (for ``"*"``, the busiest
    key without an entry of its own); ``throttled_until``: the time before which nothing
    due in the queue can be claimed (its last claim found every due job refused by a
    rate), or None; ``throttles``: how many times a claim found every due job refused by
    a rate (the queue throttled anew), since the queue's row was made."""

    rate: Rate | None
    used: int
    keys: dict[str, Rate]
    keys_used: dict[str, int]
    throttled_until: float | None = None
    throttles: int = 0

    def with_use(self, used: Mapping[str, int]) -> QueueRates:
        """These rates with their use: ``used`` by key, ``""`` the queue's rate's."""
        return QueueRates(
            rate=self.rate,
            used=int(used.get("", 0)),
            keys=dict(self.keys),
            keys_used={k: int(used.get(k, 0)) for k in self.keys},
            throttled_until=self.throttled_until,
            throttles=self.throttles,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: rates as their spellings (``"10/s"``)."""
        return {
            "rate": None if self.rate is None else str(self.rate),
            "used": self.used,
            "keys": {k: str(r) for k, r in self.keys.items()},
            "keys_used": dict(self.keys_used),
            "throttled_until": self.throttled_until,
            "throttles": self.throttles,
        }


def rates_of(raw: str | None, wait: float | None = None, throttles: int = 0) -> QueueRates | None:
    """A queue's stored ``rate_limits`` JSON (and ``rate_wait``, ``rate_throttles``) as
    :class:`QueueRates` with no use counted yet; None without any rate."""
    if not raw:
        return None
    stored = {str(k): Rate(int(v[0]), float(v[1])) for k, v in json.loads(raw).items()}
    return QueueRates(
        rate=stored.pop("", None),
        used=0,
        keys=stored,
        keys_used={},
        throttled_until=wait,
        throttles=int(throttles or 0),
    )


def max_in_window(times: list[float], period: float) -> int:
    """The most of ``times`` (claim times, say) in any interval (s, s + ``period``]: what
    a rate of N per ``period`` bounds by N (docs/flow-control.md "Rate limits")."""
    times = sorted(times)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - period:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
