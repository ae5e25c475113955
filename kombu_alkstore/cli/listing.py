"""A job listing: one line (or one JSON object) per job a store read returns."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TextIO

from ..present import decode, job_dict
from ..store import Job, Store
from .connection import open_cli_store
from .errors import CLIError
from .output import table

#: A listing's column: its header and the cell of a job (with its decoded message).
Column = tuple[str, Callable[[Job, dict[str, Any]], str]]


def list_jobs(
    args: argparse.Namespace,
    out: TextIO,
    read: Callable[[Store], list[Job]],
    what: str,
    columns: list[Column],
    order: str,
    right: tuple[int, ...] = (),
) -> int:
    """One line per job ``read(store)`` returns (``--queue``, ``--limit``, ``--json``);
    says so when there are none, and when ``--limit`` may have cut the list."""
    if args.limit < 1:
        raise CLIError(f"--limit must be at least 1, got {args.limit}")
    store = open_cli_store(args)
    try:
        jobs = read(store)
    finally:
        store.close()
    if args.json:
        out.write(json.dumps([job_dict(j) for j in jobs]) + "\n")
        return 0
    if not jobs:
        where = f" in queue {args.queue!r}" if args.queue else ""
        out.write(f"no {what}{where}\n")
        return 0
    rows = []
    for j in jobs:
        d = decode(j.body)
        rows.append([cell(j, d) for _, cell in columns])
    out.write(table(rows, [name for name, _ in columns], right=right) + "\n")
    if len(jobs) == args.limit:
        out.write(f"(first {args.limit}, {order}; use --limit to see more)\n")
    return 0


def add_listing_options(parser: argparse.ArgumentParser) -> None:
    """The options of a job listing (see :func:`list_jobs`)."""
    parser.add_argument("--queue", metavar="Q", help="only this queue")
    parser.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def task_id_cell(j: Job, d: dict[str, Any]) -> str:
    """The Celery task id (the message id when the body names none), or ``-``."""
    return str(d.get("task_id") or j.msg_id or "-")


def task_cell(j: Job, d: dict[str, Any]) -> str:
    """The Celery task name, or ``-``."""
    return str(d.get("task") or "-")
