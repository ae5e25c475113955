"""Cron boundaries across daylight saving: the rules on known days, and the generator
checked against the brute-force reference (``tests/beat/dst_reference.py``)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from celery_beat_alkstore.cron import cron, utc_iso
from celery_beat_alkstore.spec import parse_spec
from tests.beat.dst_reference import SPECS, YEARS, ZONES, check


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def _day(spec: str, zone: str, start: str, end: str) -> list[str]:
    c = cron(tuple(spec.split()), zone)
    return [utc_iso(b) for b in c.between(_utc(start), _utc(end))]


# Europe/London 2026: clocks go 01:00 -> 02:00 on 29 March, 02:00 -> 01:00 on 25 October.
# America/New_York 2026: 02:00 -> 03:00 on 8 March. Australia/Lord_Howe: 02:00 -> 02:30
# on 4 October 2026 (UTC 15:30 the day before), 02:00 -> 01:30 on 5 April 2026.
@pytest.mark.parametrize(
    "spec, zone, window, expected",
    [
        # fixed-time in the gap: once, at the first instant after it (02:00 BST = 01:00Z)
        ("30 1 * * *", "Europe/London", ("2026-03-29", "2026-03-30"), ["2026-03-29T01:00:00Z"]),
        # several skipped times of one gap: still once
        (
            "* 1 * * *",
            "Europe/London",
            ("2026-03-29", "2026-03-29T23:00"),
            ["2026-03-29T01:00:00Z"],
        ),
        # wildcard-hour: nothing inside the gap (01:30 does not exist), 02:30 BST is 01:30Z
        (
            "30 * * * *",
            "Europe/London",
            ("2026-03-29T00:00", "2026-03-29T02:00"),
            ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"],
        ),
        # fixed-time in the repeated hour: first occurrence only (01:30 BST = 00:30Z)
        ("30 1 * * *", "Europe/London", ("2026-10-25", "2026-10-26"), ["2026-10-25T00:30:00Z"]),
        # wildcard-hour in the repeated hour: both real instants
        (
            "30 * * * *",
            "Europe/London",
            ("2026-10-25T00:00", "2026-10-25T02:00"),
            ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"],
        ),
        # New York's gap: 02:30 fires at 03:00 EDT (07:00Z); the day after at 06:30Z
        (
            "30 2 * * *",
            "America/New_York",
            ("2026-03-08", "2026-03-10"),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
        ),
        # Lord Howe's 30-minute gap: 02:15 fires at 02:30 local (15:30Z the day before)
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            ("2026-10-03", "2026-10-04"),
            ["2026-10-03T15:30:00Z"],
        ),
        # Lord Howe's repeated half hour: 01:45 twice for a wildcard hour, once otherwise
        (
            "45 * * * *",
            "Australia/Lord_Howe",
            ("2026-04-04T14:00", "2026-04-04T15:59"),
            ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"],
        ),
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            ("2026-04-04", "2026-04-05"),
            ["2026-04-04T14:45:00Z"],
        ),
    ],
)
def test_vixie_dst_rules_on_known_days(spec, zone, window, expected):
    assert _day(spec, zone, *window) == expected


def test_next_after_chains_from_the_stored_boundary_not_from_now():
    c = parse_spec("cron 30 7 * * * Europe/Paris")
    b = c.first_after(_utc("2026-03-28T12:00"))
    assert utc_iso(b) == "2026-03-29T05:30:00Z"  # CEST from that night: 07:30 = 05:30Z
    assert utc_iso(c.next_after(b)) == "2026-03-30T05:30:00Z"
    before = c.next_after(_utc("2026-03-27T06:00"))
    assert utc_iso(before) == "2026-03-27T06:30:00Z"  # CET: 07:30 = 06:30Z


@pytest.mark.slow
def test_generator_matches_the_brute_force_reference_on_the_dst_sample(capsys):
    """Every zone x 2000-2037: 12 hours either side of each transition, plus a random day
    a year, minute by minute, for fixed-time and wildcard-hour specs (``python -m
    tests.beat.dst_reference --exhaustive`` checks every minute of every year)."""
    report = check()
    with capsys.disabled():
        print(f"\nDST reference check: {report.line()}")
    assert report.zones == len(ZONES) == 6 and report.years == len(YEARS) == 38
    assert report.specs == len(SPECS)
    assert report.transitions > 300  # Sao Paulo dropped DST in 2019; Troll has it yearly
    assert report.mismatches == [], "\n".join(report.mismatches[:10])
