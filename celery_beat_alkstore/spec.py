"""The schedule spec grammar: ``@every <n><unit>``, unit ``s|m|h|d``.

``n`` is a positive whole number. A ``beat_schedule`` entry given as a number of seconds,
a ``timedelta`` or a plain ``celery.schedules.schedule`` interval is converted to the same
form (whole seconds only). ``crontab`` and ``solar`` schedules are refused, and so is any
other spec, with an error that says which entry and why.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

from kombu_alkstore.errors import ConfigurationError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The longest interval accepted (100 years): keeps boundary arithmetic exact.
MAX_INTERVAL = 100 * 365 * 86400

_EVERY = re.compile(r"^@every\s+([0-9]+)\s*([smhd])$")


def _where(name: str | None, what: str = "schedule") -> str:
    return f"{what} {name!r}: " if name else ""


def parse_spec(spec: Any, name: str | None = None, what: str = "schedule") -> tuple[str, int]:
    """Parse a spec (or convert a number/timedelta/interval schedule).

    Returns ``(canonical_spec, interval_seconds)``; raises :class:`ConfigurationError`
    naming the schedule (when ``name`` is given) and saying why the spec is refused.
    """
    where = _where(name, what)
    if isinstance(spec, str):
        return _parse_text(spec, where)
    if isinstance(spec, bool):
        raise ConfigurationError(f"{where}spec {spec!r} is not a schedule")
    if isinstance(spec, (int, float)):
        return from_seconds(spec, where)
    if isinstance(spec, timedelta):
        return from_seconds(spec.total_seconds(), where)
    return _from_celery(spec, where)


def _parse_text(spec: str, where: str) -> tuple[str, int]:
    text = spec.strip()
    match = _EVERY.match(text)
    if match is None:
        if text.startswith("@every"):
            why = "expected '@every <n><unit>' with a whole number n and unit s, m, h or d"
        elif len(text.split()) == 5 or text.startswith("@"):
            why = "cron schedules are not supported; only '@every <n><unit>' (unit s, m, h or d) is"
        else:
            why = "only '@every <n><unit>' (unit s, m, h or d) is supported"
        raise ConfigurationError(f"{where}bad schedule spec {spec!r}: {why}")
    count, unit = int(match.group(1)), match.group(2)
    if count <= 0:
        raise ConfigurationError(f"{where}bad schedule spec {spec!r}: the interval must be > 0")
    seconds = count * UNITS[unit]
    if seconds > MAX_INTERVAL:
        raise ConfigurationError(
            f"{where}bad schedule spec {spec!r}: the interval is longer than 100 years"
        )
    return format_spec(seconds), seconds


def from_seconds(seconds: float, where: str = "") -> tuple[str, int]:
    """``(canonical_spec, interval)`` for an interval in seconds (a whole number > 0)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"{where}interval {seconds!r} s must be a positive duration")
    if seconds != int(seconds):
        raise ConfigurationError(
            f"{where}interval {seconds!r} s is not a whole number of seconds "
            "(sub-second intervals are not supported)"
        )
    if seconds > MAX_INTERVAL:
        raise ConfigurationError(f"{where}interval {seconds!r} s is longer than 100 years")
    whole = int(seconds)
    return format_spec(whole), whole


def format_spec(seconds: int) -> str:
    """The canonical spec for ``seconds``: the largest unit that divides it evenly."""
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"@every {seconds // UNITS[unit]}{unit}"
    return f"@every {seconds}s"


def _from_celery(spec: Any, where: str) -> tuple[str, int]:
    from celery import schedules

    kind = type(spec).__name__
    if isinstance(spec, schedules.crontab):
        raise ConfigurationError(
            f"{where}crontab schedules are not supported by the alkstore scheduler "
            "(use '@every <n><unit>', a number of seconds or a timedelta)"
        )
    if isinstance(spec, schedules.solar):
        raise ConfigurationError(
            f"{where}solar schedules are not supported by the alkstore scheduler "
            "(use '@every <n><unit>', a number of seconds or a timedelta)"
        )
    if type(spec) is schedules.schedule:
        return from_seconds(spec.run_every.total_seconds(), where)
    raise ConfigurationError(
        f"{where}schedule of type {kind} is not supported "
        "(use '@every <n><unit>', a number of seconds or a timedelta)"
    )
