"""A brute-force reference for cron boundaries, and the check of the generator against it.

The reference walks every UTC minute, derives the local wall time with ``zoneinfo`` and
matches it against the fields, applying the DST rules literally:

* a match fires, except a fixed-time entry's second occurrence of a repeated wall time;
* a fixed-time entry also fires at the first minute after a forward jump when a wall
  time the jump skipped matches.

``python -m tests.beat.dst_reference [--exhaustive]`` checks every zone and spec over
2000-2037: the DST sample (12 hours either side of each transition, and one seeded random day
a year) by default, every minute of every year with ``--exhaustive``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from celery_beat_alkstore.cron import Cron, cron

ZONES = (
    "Australia/Lord_Howe",  # 30-minute DST
    "Pacific/Chatham",  # +12:45 / +13:45, transitions at 02:45 local
    "Antarctica/Troll",  # +00 / +02: a two-hour gap and a two-hour repeat
    "America/Sao_Paulo",  # DST until 2019, starting at midnight (00:00 does not exist)
    "Europe/London",
    "America/New_York",
)
YEARS = range(2000, 2038)
#: Fixed-time and wildcard-hour entries that land in the gaps and repeats of those zones.
SPECS = (
    "30 2 * * *",  # fixed: in the New York / Lord Howe gaps
    "0,30 1-3 * * *",  # fixed, several times in one gap (Troll, London)
    "45 2 * * *",  # fixed: Chatham's 02:45 does not exist on its spring day
    "0 0 * * *",  # fixed: Sao Paulo's midnight gap
    "*/15 * * * *",  # wildcard-hour: none in a gap, both occurrences in a repeat
    "15,45 * * * 0",  # wildcard-hour, Sundays only
    "* 1 * * *",  # fixed-time with every minute of the hour
)
MINUTE = 60
DAY = 86400


def reference(c: Cron, start: int, end: int) -> list[float]:
    """Boundaries in ``(start, end]`` by walking every UTC minute (``start`` whole)."""
    out: list[float] = []
    prev = datetime.fromtimestamp(start, c.tz).replace(tzinfo=None)
    step = timedelta(minutes=1)
    for u in range(start + MINUTE, end + 1, MINUTE):
        local = datetime.fromtimestamp(u, c.tz)
        wall = local.replace(tzinfo=None)
        fire = c.matches(wall) and (c.wildcard_hour or local.fold == 0)
        if not fire and not c.wildcard_hour and wall - prev > step:
            skipped = prev + step
            while skipped < wall:
                if c.matches(skipped):
                    fire = True
                    break
                skipped += step
        if fire:
            out.append(float(u))
        prev = wall
    return out


def generated(c: Cron, start: int, end: int) -> list[float]:
    """Boundaries in ``(start, end]`` by chaining ``next_after`` (as the beat advances)."""
    out: list[float] = []
    b = c.next_after(start)
    while b <= end:
        out.append(b)
        b = c.next_after(b)
    return out


def transitions(zone: str, year: int) -> list[int]:
    """The UTC instants (whole minutes) where ``zone``'s offset changes in ``year``."""
    tz = ZoneInfo(zone)

    def offset(t: int) -> timedelta | None:
        return datetime.fromtimestamp(t, tz).utcoffset()

    start = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp())
    found = []
    for day in range(start, end, DAY):
        if offset(day) != offset(day + DAY):
            lo, hi = day, day + DAY
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) // 2 // MINUTE * MINUTE
                if offset(mid) == offset(lo):
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
    return found


def windows(zone: str, year: int, rng: random.Random) -> Iterator[tuple[int, int]]:
    """The sample of ``year``: 12 hours either side of each transition, one random day."""
    for t in transitions(zone, year):
        yield t - DAY // 2, t + DAY // 2
    start = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
    day = start + rng.randrange(365) * DAY
    yield day, day + DAY


@dataclass
class Report:
    zones: int = 0
    years: int = 0
    specs: int = 0
    transitions: int = 0
    minutes: int = 0
    boundaries: int = 0
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.zones} zones x {self.years} years x {self.specs} specs: "
            f"{self.transitions} transitions, {self.minutes} UTC minutes, "
            f"{self.boundaries} boundaries, {len(self.mismatches)} mismatches "
            f"({self.seconds:.1f} s)"
        )


def check(exhaustive: bool = False, zones=ZONES, years=YEARS, specs=SPECS) -> Report:
    """Compare generator and reference; every mismatch is described in the report."""
    began = time.monotonic()
    rep = Report(zones=len(zones), years=len(years), specs=len(specs))
    rng = random.Random(16)
    for zone in zones:
        crons = [cron(tuple(s.split()), zone) for s in specs]
        for year in years:
            rep.transitions += len(transitions(zone, year))
            if exhaustive:
                start = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
                end = int(datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp())
                spans = [(start, end)]
            else:
                spans = list(windows(zone, year, rng))
            for lo, hi in spans:
                rep.minutes += (hi - lo) // MINUTE
                for spec, c in zip(specs, crons, strict=True):
                    want, got = reference(c, lo, hi), generated(c, lo, hi)
                    rep.boundaries += len(want)
                    if want != got:
                        extra = sorted(set(got) - set(want))[:3]
                        missing = sorted(set(want) - set(got))[:3]
                        rep.mismatches.append(
                            f"{zone} {spec!r} ({lo}, {hi}]: missing {missing}, extra {extra}"
                            + (", duplicates" if len(got) != len(set(got)) else "")
                        )
    rep.seconds = time.monotonic() - began
    return rep


def main(argv: list[str]) -> int:
    exhaustive = "--exhaustive" in argv
    rep = check(exhaustive=exhaustive)
    print(("exhaustive: " if exhaustive else "DST sample: ") + rep.line())
    for m in rep.mismatches[:20]:
        print("  " + m)
    return 1 if rep.mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
