"""The retry curve shared by both engines (SPEC §3)."""

from __future__ import annotations

import random

#: Upper bound of any computed retry delay, in seconds (contract constant).
MAX_BACKOFF = 3600.0


def backoff_range(attempt: int, base: float) -> tuple[float, float]:
    """Return the ``(low, high)`` delay bounds for the given attempt number.

    Equal-jitter exponential: ``[base·2^(a−1)/2, base·2^(a−1)]``, capped at one hour.
    """
    high = min(MAX_BACKOFF, base * 2.0 ** max(min(attempt, 64) - 1, 0))
    return high / 2.0, high


def backoff_delay(attempt: int, base: float, rng: random.Random | None = None) -> float:
    """A delay drawn uniformly from :func:`backoff_range` for this attempt."""
    low, high = backoff_range(attempt, base)
    return (rng or random).uniform(low, high)


def retry_wait(
    attempt: int, base: float, delay: float | None = None, first_immediate: bool = False
) -> float:
    """How long a failed attempt waits before it is due again: ``delay`` when given, 0
    after a first attempt with ``first_immediate`` (a requeue), else the backoff curve."""
    if delay is not None:
        return float(delay)
    if first_immediate and attempt <= 1:
        return 0.0
    return backoff_delay(attempt, base)
