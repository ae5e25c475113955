"""``scheduled``: the delayed tasks (ETA, countdown) the broker holds, soonest first."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..present import fmt_time
from .listing import Column, add_listing_options, list_jobs, task_cell, task_id_cell

#: What ``scheduled --help`` says about delayed tasks and the Celery commands that see
#: (or do not see) them.
SCHEDULED_DESCRIPTION = (
    "Delayed tasks (ETA, countdown) the broker holds until they are due, soonest first. "
    "They are pending messages of their queue: celery purge and the dashboard's Purge "
    "pending delete them too; celery inspect query_task does not see them (no worker "
    "holds them), nor does celery inspect scheduled."
)


def cmd_scheduled(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Delayed tasks (ETA, countdown) held by the broker, soonest first: what
    ``celery inspect scheduled`` cannot list here, since workers do not hold them."""
    columns: list[Column] = [
        ("ETA", lambda j, d: fmt_time(j.run_at)),
        ("TASK", task_cell),
        ("TASK ID", task_id_cell),
        ("QUEUE", lambda j, d: j.queue),
        ("PRIORITY", lambda j, d: str(j.priority)),
    ]
    return list_jobs(
        args,
        out,
        lambda store: store.scheduled(queue=args.queue, limit=args.limit),
        "scheduled tasks",
        columns,
        "soonest first",
    )


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``scheduled`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "scheduled",
        parents=[common],
        help="delayed tasks (ETA, countdown) the broker holds, soonest first",
        description=SCHEDULED_DESCRIPTION,
    )
    add_listing_options(p)
    p.set_defaults(func=cmd_scheduled)
