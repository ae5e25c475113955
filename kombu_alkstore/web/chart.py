"""The rate chart: per-minute publishes and acks over the last hour, drawn as SVG on the
server (the template writes the elements; every value here is a number)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..store.admin import RatePoint

WIDTH, HEIGHT = 720, 180
PAD_LEFT, PAD_BOTTOM, PAD_TOP, PAD_RIGHT = 48, 22, 10, 10


@dataclass(frozen=True)
class Chart:
    """Polyline points and axis labels for the template."""

    width: int
    height: int
    published: str
    acked: str
    y_max: int
    x_labels: list[tuple[float, str]]
    y_labels: list[tuple[float, str]]
    total_published: int
    total_acked: int


def per_minute(
    points: Iterable[RatePoint], queue: str | None, now: float, minutes: int = 60
) -> tuple[list[int], list[int]]:
    """Publishes and acks per minute for the last ``minutes`` minutes (oldest first),
    of ``queue`` or of every queue."""
    last = now // 60 * 60
    first = last - (minutes - 1) * 60
    pub, ack = [0] * minutes, [0] * minutes
    for p in points:
        if queue is not None and p.queue != queue:
            continue
        i = int((p.minute - first) // 60)
        if 0 <= i < minutes:
            pub[i] += p.published
            ack[i] += p.acked
    return pub, ack


def build(points: Iterable[RatePoint], queue: str | None = None, now: float | None = None) -> Chart:
    """The chart of the last hour (of ``queue``, or of all queues)."""
    now = time.time() if now is None else now
    pub, ack = per_minute(points, queue, now)
    n = len(pub)
    y_max = max(1, *pub, *ack)
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def xy(i: int, v: int) -> str:
        x = PAD_LEFT + inner_w * i / (n - 1)
        y = PAD_TOP + inner_h * (1 - v / y_max)
        return f"{x:.1f},{y:.1f}"

    x_labels = [
        (PAD_LEFT + inner_w * i / (n - 1), f"-{n - 1 - i}m" if i < n - 1 else "now")
        for i in range(0, n, 10)
    ] + [(PAD_LEFT + inner_w, "now")]
    y_labels = [(PAD_TOP + inner_h * (1 - f), f"{round(y_max * f)}") for f in (0, 0.5, 1)]
    return Chart(
        WIDTH,
        HEIGHT,
        " ".join(xy(i, v) for i, v in enumerate(pub)),
        " ".join(xy(i, v) for i, v in enumerate(ack)),
        y_max,
        x_labels,
        y_labels,
        sum(pub),
        sum(ack),
    )


def last_minutes_rate(
    points: Iterable[RatePoint], queue: str, now: float, minutes: int = 5
) -> tuple[float, float]:
    """Average publishes and acks per minute of ``queue`` over the last ``minutes``
    whole minutes plus the current one."""
    pub, ack = per_minute(points, queue, now, minutes)
    return sum(pub) / minutes, sum(ack) / minutes
