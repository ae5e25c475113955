"""Fair share between the keys of a queue (docs/flow-control.md "Fair share").

A fair queue's claims take from its limit keys (``alkstore_limit_key``) in turn,
weighted by each key's **share**, instead of by due time alone: a flood of one key
does not starve the others. The shares live on the queue's row (migration 0011:
``queues.fair_shares``, a JSON object ``{"*": W, "<key>": W}``; ``"*"`` is the share of
every key without its own, and of the jobs without a key, which form one group). The
claim (PostgreSQL's ``limited_picks``, SQLite's ``claim_pick_limited``) orders a fair
queue's due jobs by start-time fair queuing: a group's n-th due job has the tag
``start + (n - 1) / share``, where ``start`` is the group's pass or the queue's virtual
time, whichever is later; the claim takes the smallest tags (within every concurrency
and rate limit) and advances the passes and the virtual time. So over any run of claims
each group with due jobs gets claims in proportion to its share, within one claim's
batch per group, and a group that was idle gets no credit for it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from .limits import EVERY_KEY, check_key
from .options import validate_name
from .statements import Statements

#: The largest share accepted (a share is a weight: only ratios matter).
MAX_SHARE = 1_000_000.0


def check_share(value: Any, option: str = "share") -> float:
    """``value`` as a share: a number above 0 and at most :data:`MAX_SHARE`, refused by
    ``option``'s name in one line otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_SHARE
    ):
        raise ConfigurationError(
            f"{option} must be a number above 0 and at most {MAX_SHARE:g}, got {value!r}"
        )
    return float(value)


def check_shares(raw: Any, option: str = "fair") -> dict[str, float]:
    """The shares of a fair queue: ``True`` (every key share 1) or a mapping of keys
    (``"*"``: every key without its own) to shares, as ``{key: share}`` with ``"*"``
    present (1 unless given); refused by ``option``'s name in one line otherwise."""
    if raw is True:
        return {EVERY_KEY: 1.0}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"{option} must be true or map keys to shares (e.g. {{'*': 1, 'tenant:big': 3}}), "
            f"got {raw!r}"
        )
    shares = {EVERY_KEY: 1.0}
    for key, share in raw.items():
        check_key(key, f"{option} key")
        shares[key] = check_share(share, f"{option}[{key!r}]")
    return shares


def parse_fair(raw: Any, option: str = "limits") -> dict[str, dict[str, float]]:
    """The fair queues of the ``limits`` transport option (``{queue: {"fair": true}}``
    or ``{queue: {"fair": {"*": 1, "tenant:big": 3}}}``) as ``{queue: shares}``; queues
    without ``"fair"`` (or with ``"fair": false``) are left out."""
    if not isinstance(raw, Mapping):
        return {}
    parsed: dict[str, dict[str, float]] = {}
    for queue, spec in raw.items():
        if not isinstance(spec, Mapping) or spec.get("fair") in (None, False):
            continue
        validate_name(queue, f"{option} queue name")
        parsed[queue] = check_shares(spec["fair"], f"{option}[{queue!r}]['fair']")
    return parsed


class FairStatements(Statements):
    """Setting fair share, a part of :class:`~.interface.Store`."""

    def set_fair(self, queue: str, shares: Mapping[str, float] | bool = True) -> dict[str, float]:
        """Make ``queue`` fair from its next claim on, with ``shares`` (``True``: every
        key share 1; see :func:`check_shares`), replacing any shares it had. Returns
        the shares stored."""
        validate_name(queue, "queue name")
        checked = check_shares(shares, "shares")
        self._all("fair_set", {"queue": queue, "shares": json.dumps(checked, sort_keys=True)})
        return checked

    def clear_fair(self, queue: str) -> bool:
        """``queue`` no longer fair (claims by priority and due time) from its next claim
        on; False when the queue has no row."""
        validate_name(queue, "queue name")
        return bool(self._all("fair_clear", {"queue": queue}))

    def fair_shares(self, queue: str) -> dict[str, float] | None:
        """``queue``'s shares, or None when it is not fair."""
        validate_name(queue, "queue name")
        row = self._one("fair_get", {"queue": queue})
        if row is None or row["fair_shares"] is None:
            return None
        return {str(k): float(v) for k, v in json.loads(row["fair_shares"]).items()}

    def apply_fair(self, fair: Mapping[str, Mapping[str, float]]) -> None:
        """Set the shares :func:`parse_fair` read (the ``limits`` transport option)."""
        for queue, shares in fair.items():
            self.set_fair(queue, dict(shares))


__all__ = ["FairStatements", "MAX_SHARE", "check_share", "check_shares", "parse_fair"]
