"""``status``: per-queue counts (pending, delayed, processing, dead), which queues are
paused, each concurrency limit against its use, and what keeps dead rows in the queue
tables when that matters (:mod:`..present.vacuum`), once or ``--watch``."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from datetime import datetime
from typing import Any, TextIO

from ..present import fmt_age, fmt_time
from ..present.vacuum import HORIZON_AGE, vacuum_warnings
from ..store import QueueCounts, Store
from .arguments import non_negative, positive
from .connection import open_cli_store
from .limits import describe, rate_used_text, used_text
from .output import table

#: How the status output says a paused queue is resumed.
RESUME_HINT = "kombu-alkstore queue resume NAME"


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the counts; with ``--watch``, again every SECONDS (the screen cleared on a
    terminal) until interrupted or ``--iterations`` rounds."""
    store = open_cli_store(args)
    try:
        rounds = 0
        while True:
            counts, paused = read_status(store, args.queue or None)
            rendered = render_status(counts, args, store, paused)
            if args.watch is not None and out.isatty():
                out.write("\x1b[H\x1b[2J")
            out.write(rendered + "\n")
            out.flush()
            rounds += 1
            if args.watch is None or (args.iterations and rounds >= args.iterations):
                return 0
            time.sleep(args.watch)
    finally:
        store.close()


def read_status(
    store: Store, queues: list[str] | None
) -> tuple[list[QueueCounts], dict[str, float]]:
    """The counts of ``queues`` (default: every queue with messages or dead letters, and
    every paused queue, even empty), by queue name, and the paused ones among them with
    when each was paused."""
    counts = store.counts(queues)
    paused = store.paused_queues()
    if queues is None:
        known = {c.queue for c in counts}
        counts += [QueueCounts(queue=name) for name in paused if name not in known]
        counts.sort(key=lambda c: c.queue)
    shown = {c.queue for c in counts}
    return counts, {name: at for name, at in paused.items() if name in shown}


def render_status(
    counts: list[QueueCounts],
    args: argparse.Namespace,
    store: Store,
    paused: dict[str, float] | None = None,
) -> str:
    """The counts as JSON (``--json``: each queue's counts, ``paused`` true or false and
    ``paused_at`` in epoch seconds or null) or as a table under the store's masked URL,
    with a total row when there is more than one queue and a PAUSED column (since when)
    when any queue shown is paused."""
    paused = paused or {}
    limits = {q.queue: q for q in store.limits()}
    if args.json:
        return json.dumps(
            [
                {
                    **asdict(c),
                    "paused": c.queue in paused,
                    "paused_at": paused.get(c.queue),
                    # {"limit", "used", "keys", "keys_used", "rates"}, or null without a
                    # limit; "rates": {"rate", "used", "keys", "keys_used",
                    # "throttled_until"} or null
                    "limits": limits[c.queue].as_dict() if c.queue in limits else None,
                }
                for c in counts
            ]
        )
    rows = [
        [
            c.queue,
            str(c.pending),
            str(c.delayed),
            str(c.processing),
            str(c.dead),
            fmt_age(c.oldest_age),
        ]
        for c in counts
    ]
    where = f"{store.url.masked()} (schema {store.options.schema})"
    head = f"{where} at {datetime.now().astimezone().strftime('%H:%M:%S')}"
    age = getattr(args, "horizon_age", HORIZON_AGE)
    health = store.vacuum_health(older_than=age)
    warnings = "".join(f"\nwarning: {line}" for line in vacuum_warnings(health, age))
    if not rows:
        return f"{head}\nno messages in any queue{warnings}"
    totals = [
        sum(getattr(c, f) for c in counts) for f in ("pending", "delayed", "processing", "dead")
    ]
    if len(rows) > 1:
        oldest = max((c.oldest_age for c in counts if c.oldest_age is not None), default=None)
        rows.append(["(total)", *(str(t) for t in totals), fmt_age(oldest)])
    headers = ["QUEUE", "PENDING", "DELAYED", "PROCESSING", "DEAD", "OLDEST"]
    if paused:
        headers.append("PAUSED")
        for row in rows:
            at = paused.get(row[0]) if row[0] != "(total)" else None
            row.append("-" if at is None else f"since {fmt_time(at)}")
    shown = [limits[c.queue] for c in counts if c.queue in limits]
    if shown:
        # The queue's claims against its limit: "3/8"; "-" without one.
        headers.append("LIMIT")
        for row in rows:
            q = limits.get(row[0])
            row.append("-" if q is None or q.limit is None else used_text(q.used, q.limit))
    rated = [q.rates for q in shown if q.rates is not None and q.rates.rate is not None]
    if rated:
        # The queue's claims within its rate's period: "3/10 per 1s"; "-" without one.
        headers.append("RATE")
        for row in rows:
            q = limits.get(row[0])
            r = None if q is None else q.rates
            row.append("-" if r is None or r.rate is None else rate_used_text(r.used, r.rate))
    body = table(rows, headers, right=(1, 2, 3, 4, 5))
    if paused:
        body += f"\npaused: claims stopped, publishes still land (resume: {RESUME_HINT})"
    for q in shown:
        if (
            q.keys
            or q.fair is not None
            or (q.rates is not None and (q.rates.keys or q.rates.throttled_until))
        ):
            body += f"\nlimits: {describe(q)}"
    return f"{head}\n{body}{warnings}"


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``status`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "status",
        parents=[common],
        help="per-queue counts: pending, delayed, processing, dead; paused queues",
    )
    p.add_argument("--queue", action="append", metavar="Q", help="only this queue (repeatable)")
    p.add_argument(
        "--watch",
        nargs="?",
        type=positive,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    p.add_argument(
        "--horizon-age",
        type=non_negative,
        default=HORIZON_AGE,
        metavar="SECONDS",
        help="name transactions open this long that keep dead rows (default 300)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_status)
