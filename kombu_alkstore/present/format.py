"""Times, ages and text as the CLI and the dashboard print them (pure functions)."""

from __future__ import annotations

from datetime import datetime


def fmt_time(ts: float | None, offset: bool = True) -> str:
    """Epoch seconds as local wall time, ``2026-11-30 12:00:00+0100`` (without the UTC
    offset when ``offset`` is false); ``-`` for None."""
    if ts is None:
        return "-"
    pattern = "%Y-%m-%d %H:%M:%S%z" if offset else "%Y-%m-%d %H:%M:%S"
    return datetime.fromtimestamp(ts).astimezone().strftime(pattern)


def fmt_age(seconds: float | None) -> str:
    """A duration in its two largest units: ``4.2s``, ``3m07s``, ``5h02m``, ``3d04h``
    (hours up to 48); negative counts as 0, ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def one_line(text: str | None, width: int | None = None) -> str:
    """``text`` with every run of whitespace (newlines too) made one space; cut to
    ``width`` characters, the last one ``…``, when longer."""
    text = " ".join((text or "").split())
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return text
