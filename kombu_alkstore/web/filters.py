"""The dead-letter filter a page or a form names, and back to query fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..store.admin import DeadFilter


def parse_filter(params: Any) -> DeadFilter:
    """A :class:`DeadFilter` from query or form fields (``since``/``until``: ISO dates or
    epoch seconds); unknown or empty fields are ignored. ValueError for a bad time."""
    return DeadFilter(
        queue=(params.get("queue") or "").strip() or None,
        task=(params.get("task") or "").strip() or None,
        error=(params.get("error") or "").strip() or None,
        since=parse_time(params.get("since")),
        until=parse_time(params.get("until")),
    )


def parse_time(text: str | None) -> float | None:
    """Epoch seconds from ``2026-11-30T12:00`` (local time), ISO with an offset, or a
    number; None when empty. Raises ValueError for anything else."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    return datetime.fromisoformat(text).timestamp()


def filter_query(where: DeadFilter) -> dict[str, str]:
    """The filter as query fields (for links that keep it): what :func:`parse_filter`
    reads back as the same filter (times to the second)."""
    out = {k: getattr(where, k) for k in ("queue", "task", "error") if getattr(where, k)}
    for k in ("since", "until"):
        v = getattr(where, k)
        if v is not None:
            out[k] = datetime.fromtimestamp(v).strftime("%Y-%m-%dT%H:%M:%S")
    return out
