"""Cron boundaries in a time zone: UTC instants from local wall time, Vixie cron's DST rules.

The five fields are Celery's ``crontab`` fields (parsed by ``celery.schedules.crontab``,
all of its syntax: ``*/15``, ``1-5``, ``mon-fri``, lists); a time matches when its minute,
hour, day of month, month *and* day of week are all in their sets (Celery's rule: the two
day fields combine with AND). Days of the week run 0-6 from Sunday.

Daylight saving, as Vixie cron:

* A *wildcard-hour* entry (its hour field as written starts with ``*``) fires at every real
  instant whose local wall time matches: none for a wall time inside a spring-forward gap,
  and one for each occurrence of a wall time in a repeated (fall-back) hour.
* Any other entry is *fixed-time*: a matching wall time skipped by a gap fires once, at
  the first instant after the gap; a repeated one fires once, at its first occurrence.

Boundaries are a set of instants, so two wall times landing on the same instant (several
skipped times of one gap, or a skipped time and the gap's end) fire once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

#: How far ahead a boundary is looked for: one Gregorian cycle covers every calendar.
SEARCH_DAYS = 146097
_DAY = timedelta(days=1)


class Cron:
    """One crontab in one time zone. Thread-safe; instances come from :func:`cron`."""

    def __init__(
        self,
        minute: Iterable[int],
        hour: Iterable[int],
        day_of_month: Iterable[int],
        month_of_year: Iterable[int],
        day_of_week: Iterable[int],
        wildcard_hour: bool,
        tz: str,
    ) -> None:
        self.minutes = tuple(sorted(minute))
        self.hours = tuple(sorted(hour))
        self.days = frozenset(day_of_month)
        self.months = frozenset(month_of_year)
        self.weekdays = frozenset(day_of_week)  # 0 = Sunday
        self.wildcard_hour = wildcard_hour
        self.tz = ZoneInfo(tz)
        self._days: dict[date, tuple[float, ...]] = {}

    def matches_date(self, d: date) -> bool:
        return d.month in self.months and d.day in self.days and d.isoweekday() % 7 in self.weekdays

    def matches(self, wall: datetime) -> bool:
        """Whether a local wall time (naive, whole minute) matches the fields."""
        return wall.minute in self.minutes and wall.hour in self.hours and self.matches_date(wall)

    # ------------------------------------------------------------- boundaries
    def next_after(self, t: float) -> float:
        """The first boundary strictly after the UTC instant ``t`` (epoch seconds).

        Raises ValueError when there is none within 400 years (e.g. 30 February)."""
        d = datetime.fromtimestamp(t, self.tz).date() - _DAY  # a day earlier: see below
        best: float | None = None
        found: date | None = None
        for _ in range(SEARCH_DAYS):
            for u in self.day(d):
                if u > t:
                    if best is None or u < best:
                        best = u
                    break
            if best is not None:
                # Offsets differ by at most a day, so a later local date can still hold
                # an earlier instant only on the next date (a repeated hour across
                # midnight); one more date settles it.
                if found is None:
                    found = d
                elif d > found:
                    return best
            try:
                d += _DAY
            except OverflowError:
                break
        if best is not None:
            return best
        raise ValueError("the crontab matches no date within 400 years")

    def between(self, start: float, end: float) -> list[float]:
        """Every boundary ``b`` with ``start < b <= end``, in order."""
        out = []
        d = datetime.fromtimestamp(start, self.tz).date() - _DAY
        last = datetime.fromtimestamp(end, self.tz).date() + _DAY
        while d <= last:
            out.extend(u for u in self.day(d) if start < u <= end)
            d += _DAY
        return sorted(set(out))

    def day(self, d: date) -> tuple[float, ...]:
        """The boundaries (sorted UTC instants) of the matching wall times of local date
        ``d`` — a gap-skipped wall time of a fixed-time entry gives the gap's end."""
        cached = self._days.get(d)
        if cached is not None:
            return cached
        found: set[float] = set()
        if self.matches_date(d):
            for h in self.hours:
                for m in self.minutes:
                    found.update(self._instants(datetime(d.year, d.month, d.day, h, m)))
        out = tuple(sorted(found))
        if len(self._days) > 4096:
            self._days.clear()
        self._days[d] = out
        return out

    def _instants(self, wall: datetime) -> list[float]:
        first = wall.replace(tzinfo=self.tz, fold=0)
        second = wall.replace(tzinfo=self.tz, fold=1)
        u0, u1 = first.timestamp(), second.timestamp()
        if u0 == u1:  # an ordinary wall time: one instant
            return [u0]
        if u0 < u1:  # repeated (fall-back): fold=0 is the first occurrence
            return [u0, u1] if self.wildcard_hour else [u0]
        # In a spring-forward gap (PEP 495: fold=0 reads it with the offset before the
        # transition, fold=1 with the one after, so u1 < transition <= u0).
        if self.wildcard_hour:
            return []
        return [self._transition(u1, u0, second.utcoffset())]

    def _transition(self, lo: float, hi: float, after: timedelta | None) -> float:
        """The instant the zone's offset becomes ``after``, in ``(lo, hi]``: the first
        instant after the gap (transitions fall on whole seconds)."""
        lo_i, hi_i = int(lo), int(-(-hi // 1))
        while hi_i - lo_i > 1:
            mid = (lo_i + hi_i) // 2
            if datetime.fromtimestamp(mid, self.tz).utcoffset() == after:
                hi_i = mid
            else:
                lo_i = mid
        return float(hi_i)


@lru_cache(maxsize=512)
def cron(fields: tuple[str, str, str, str, str], tz: str) -> Cron:
    """The :class:`Cron` of five Celery crontab fields (minute, hour, day of month, month,
    day of week) in zone ``tz``; raises ValueError naming the bad field. Cached, so a
    schedule's per-day boundaries are computed once per process."""
    from celery.schedules import crontab

    minute, hour, dom, month, dow = fields
    names = ("minute", "hour", "day-of-month", "month", "day-of-week")
    for name, value in zip(names, fields, strict=True):
        try:
            crontab(**{_CELERY_FIELD[name]: value})
        except (ValueError, TypeError, IndexError) as exc:
            raise ValueError(f"{name} field {value!r}: {exc}") from None
    c = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    return Cron(
        c.minute,
        c.hour,
        c.day_of_month,
        c.month_of_year,
        c.day_of_week,
        wildcard_hour=hour.startswith("*"),
        tz=tz,
    )


_CELERY_FIELD = {
    "minute": "minute",
    "hour": "hour",
    "day-of-month": "day_of_month",
    "month": "month_of_year",
    "day-of-week": "day_of_week",
}


def utc_iso(t: float) -> str:
    """``t`` as UTC ISO-8601 (``2026-03-29T01:00:00Z``; fractions only when present)."""
    when = datetime.fromtimestamp(t, timezone.utc)
    spec = "seconds" if when.microsecond == 0 else "microseconds"
    return when.replace(tzinfo=None).isoformat(timespec=spec) + "Z"
