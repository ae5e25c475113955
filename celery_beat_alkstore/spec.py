"""The schedule spec grammar, and each schedule's next boundary.

One grammar (the CLI, the API and ``beat_schedule`` strings)::

    @every <n><unit>                                   unit s, m, h or d; n a whole number > 0
    cron <minute> <hour> <day-of-month> <month> <day-of-week> [<time zone>]
    @hourly | @daily | @midnight | @weekly | @monthly | @yearly | @annually [<time zone>]

The ``cron`` keyword may be left out (five fields, then the optional zone). Each cron field
is Celery's ``crontab`` syntax (``*``, ``*/15``, ``1-5``, ``mon-fri``, lists); the time
zone is an IANA name (``Europe/Paris``), by default the app's (``timezone`` /
``enable_utc``). In ``beat_schedule``, a number of seconds, a ``timedelta`` or a plain
``celery.schedules.schedule`` interval becomes ``@every`` (whole seconds), and a
``celery.schedules.crontab`` becomes ``cron`` with all five of its fields. ``solar``
schedules are refused naming the entry. See ``cron.py`` for the DST rules.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kombu_alkstore.errors import ConfigurationError

from .cron import Cron, cron

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The longest interval accepted (100 years): keeps boundary arithmetic exact.
MAX_INTERVAL = 100 * 365 * 86400
KIND_EVERY = "every"
KIND_CRON = "cron"

GRAMMAR = (
    "'@every <n><unit>' (unit s, m, h or d), "
    "'cron <minute> <hour> <day-of-month> <month> <day-of-week> [<time zone>]' "
    "or '@hourly|@daily|@weekly|@monthly|@yearly [<time zone>]'"
)

_EVERY = re.compile(r"^@every\s+([0-9]+)\s*([smhd])$")
_NICKNAMES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


@dataclass(frozen=True)
class Spec:
    """A parsed schedule: ``text`` is its canonical spec without the zone, ``tz`` the
    zone its wall times are read in (``UTC`` for ``@every``, whose grid is in seconds
    since the epoch), ``interval`` the seconds between boundaries (0 for cron)."""

    kind: str
    text: str
    interval: int
    tz: str = "UTC"

    @property
    def display(self) -> str:
        """The spec as a user writes it: cron with its zone."""
        return f"{self.text} {self.tz}" if self.kind == KIND_CRON else self.text

    @property
    def cron(self) -> Cron:
        return cron(tuple(self.text.split()[1:]), self.tz)  # type: ignore[arg-type]

    def next_after(self, t: float) -> float:
        """The first boundary strictly after ``t``: for ``@every``, on the grid of ``t``
        (``t`` is a boundary: the stored ``next_at``); for cron, the next match."""
        if self.kind == KIND_EVERY:
            return t + self.interval
        return self.cron.next_after(t)

    def first_after(self, now: float, grid: float | None = None) -> float:
        """The first boundary after ``now``: ``@every`` on the grid through ``grid`` (a
        stored boundary) or, for a new schedule, on the epoch grid (multiples of the
        interval since 1970-01-01 UTC, so every beat computes the same grid)."""
        if self.kind == KIND_EVERY:
            origin = 0.0 if grid is None else grid
            return origin + (math.floor((now - origin) / self.interval) + 1) * self.interval
        return self.cron.next_after(now)

    def between(self, start: float, end: float, grid: float) -> list[float]:
        """Boundaries ``b`` with ``start < b <= end`` (``@every`` on the grid through
        ``grid``)."""
        if self.kind == KIND_CRON:
            return self.cron.between(start, end)
        out, b = [], self.first_after(start, grid)
        while b <= end:
            out.append(b)
            b += self.interval
        return out


def _where(name: str | None, what: str = "schedule") -> str:
    return f"{what} {name!r}: " if name else ""


def check_tz(tz: Any, where: str = "") -> str:
    """``tz`` if it names an IANA time zone, else a ConfigurationError."""
    if not isinstance(tz, str) or not tz.strip():
        raise ConfigurationError(f"{where}time zone must be an IANA name, got {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"{where}unknown time zone {tz!r} (an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None
    return tz


def parse_spec(
    spec: Any,
    name: str | None = None,
    what: str = "schedule",
    tz: str | None = None,
    default_tz: str = "UTC",
) -> Spec:
    """Parse a spec (or convert a number/timedelta/Celery schedule) into a :class:`Spec`.

    A cron spec is read in the zone written in it, else ``tz`` (given explicitly; a
    different zone in the spec is an error), else ``default_tz`` (the app's). Raises
    :class:`ConfigurationError` naming the schedule (when ``name`` is given), saying why,
    and quoting the grammar for a bad string.
    """
    where = _where(name, what)
    if isinstance(spec, str):
        return _parse_text(spec, where, tz, default_tz)
    if isinstance(spec, bool):
        raise ConfigurationError(f"{where}spec {spec!r} is not a schedule")
    if isinstance(spec, (int, float)):
        return from_seconds(spec, where)
    if isinstance(spec, timedelta):
        return from_seconds(spec.total_seconds(), where)
    return _from_celery(spec, where, tz, default_tz)


def _bad(spec: str, where: str, why: str) -> ConfigurationError:
    return ConfigurationError(f"{where}bad schedule spec {spec!r}: {why}; expected {GRAMMAR}")


def _parse_text(spec: str, where: str, tz: str | None, default_tz: str = "UTC") -> Spec:
    text = spec.strip()
    if text.startswith("@every"):
        match = _EVERY.match(text)
        if match is None:
            raise _bad(spec, where, "'@every' needs a whole number and a unit s, m, h or d")
        count, unit = int(match.group(1)), match.group(2)
        if count <= 0:
            raise _bad(spec, where, "the interval must be > 0")
        seconds = count * UNITS[unit]
        if seconds > MAX_INTERVAL:
            raise _bad(spec, where, "the interval is longer than 100 years")
        return Spec(KIND_EVERY, format_spec(seconds), seconds)
    words = text.split()
    if words and words[0] in _NICKNAMES:
        if len(words) > 2:
            raise _bad(spec, where, f"{words[0]} takes at most a time zone after it")
        return _cron(spec, _NICKNAMES[words[0]].split(), words[1:], where, tz, default_tz)
    if words and words[0] == "cron":
        words = words[1:]
    elif not words or words[0].startswith("@"):
        raise _bad(spec, where, "unknown schedule")
    if len(words) not in (5, 6):
        raise _bad(spec, where, f"a cron spec has 5 fields and an optional zone, got {len(words)}")
    return _cron(spec, words[:5], words[5:], where, tz, default_tz)


def _cron(
    spec: str, fields: list[str], zone: list[str], where: str, tz: str | None, default_tz: str
) -> Spec:
    zone_name = zone[0] if zone else (tz or default_tz)
    if zone and tz is not None and zone[0] != tz:
        raise _bad(spec, where, f"the time zone is given twice ({zone[0]!r} and {tz!r})")
    try:
        check_tz(zone_name)
    except ConfigurationError as exc:
        raise _bad(spec, where, str(exc)) from None
    try:
        c = cron(tuple(fields), zone_name)  # type: ignore[arg-type]
    except ValueError as exc:
        raise _bad(spec, where, str(exc)) from None
    try:
        c.next_after(0.0)
    except ValueError:
        raise _bad(spec, where, "the fields match no date (e.g. 30 February)") from None
    return Spec(KIND_CRON, "cron " + " ".join(fields), 0, zone_name)


def from_seconds(seconds: float, where: str = "") -> Spec:
    """The ``@every`` spec for an interval in seconds (a whole number > 0)."""
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
    return Spec(KIND_EVERY, format_spec(whole), whole)


def format_spec(seconds: int) -> str:
    """The canonical spec for ``seconds``: the largest unit that divides it evenly."""
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"@every {seconds // UNITS[unit]}{unit}"
    return f"@every {seconds}s"


def _field(value: Any) -> str:
    """A crontab field as written: strings as they are, numbers and sets spelled out."""
    if isinstance(value, str):
        return "".join(value.split())
    if isinstance(value, int):
        return str(value)
    return ",".join(str(v) for v in sorted(value))


def _from_celery(spec: Any, where: str, tz: str | None, default_tz: str) -> Spec:
    from celery import schedules

    kind = type(spec).__name__
    if isinstance(spec, schedules.crontab):
        fields = [
            _field(spec._orig_minute),
            _field(spec._orig_hour),
            _field(spec._orig_day_of_month),
            _field(spec._orig_month_of_year),
            _field(spec._orig_day_of_week),
        ]
        return _cron("crontab(" + " ".join(fields) + ")", fields, [], where, tz, default_tz)
    if isinstance(spec, schedules.solar):
        raise ConfigurationError(
            f"{where}solar schedules are not supported by the alkstore scheduler "
            f"(use a crontab at the local time you want, or {GRAMMAR})"
        )
    if type(spec) is schedules.schedule:
        return from_seconds(spec.run_every.total_seconds(), where)
    raise ConfigurationError(f"{where}schedule of type {kind} is not supported; use {GRAMMAR}")


def row_spec(kind: str, text: str, interval: float, tz: str) -> Spec:
    """The :class:`Spec` of a stored row (raises ConfigurationError if it is malformed,
    e.g. written by hand or by a newer version)."""
    if kind == KIND_EVERY:
        return from_seconds(interval)
    if kind == KIND_CRON:
        return _parse_text(text, "", tz)
    raise ConfigurationError(f"unknown schedule kind {kind!r}")
