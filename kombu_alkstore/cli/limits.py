"""``queue limit NAME N [--key K]`` / ``queue limit NAME --clear [--key K]``: a queue's
concurrency limit at run time (docs/flow-control.md), and how status shows limits."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..errors import ConfigurationError
from ..store.limits import EVERY_KEY, QueueLimit, check_key, check_limit
from .connection import open_cli_store
from .errors import CLIError


def _count(text: str) -> int:
    """The N of ``queue limit``: an integer >= 0, else a one-line usage error."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the limit must be an integer >= 0, got {text!r}"
        ) from None
    try:
        return check_limit(value)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_limit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Set or clear the limit, then print the queue's limits and their use. A queue the
    store does not know (never declared, no messages) is refused: a typo would otherwise
    limit nothing."""
    if (args.n is None) == (not args.clear):
        raise CLIError("give the limit N, or --clear (not both)")
    try:
        check_key(args.key, "--key")
    except ConfigurationError as exc:
        raise CLIError(str(exc)) from None
    store = open_cli_store(args)
    try:
        if not store.knows_queue(args.name, paused=False):
            raise CLIError(
                f"no queue {args.name!r} is declared or holds messages (a typo?); "
                "declare it first (start a worker or publish to it)"
            )
        what = f"queue {args.name!r}" + (f" key {args.key!r}" if args.key else "")
        if args.clear:
            store.clear_limit(args.name, args.key)
        else:
            store.set_limit(args.name, args.n, args.key)
        now = [q for q in store.limits() if q.queue == args.name]
        if not args.clear:
            out.write(f"{what}: at most {args.n} claimed at once\n")
        elif args.key is None and now and now[0].keys:
            keys = ", ".join(repr(k) for k in now[0].keys)
            out.write(
                f"{what}: no queue-wide limit; its per-key limits stay ({keys}: "
                "--clear --key K clears one)\n"
            )
        else:
            out.write(f"{what}: no limit\n")
        for limit in now:
            out.write(describe(limit) + "\n")
    finally:
        store.close()
    return 0


def used_text(used: int, limit: int | None) -> str:
    """``3/8`` (3 claimed of 8), or ``3`` with no limit."""
    return str(used) if limit is None else f"{used}/{limit}"


def describe(limit: QueueLimit) -> str:
    """One line: the queue's claims against its limit and each per-key limit."""
    parts = [f"{limit.queue}: claimed {used_text(limit.used, limit.limit)}"]
    for key, n in sorted(limit.keys.items()):
        if key == EVERY_KEY:
            busiest = max(limit.keys_used.values(), default=0)
            parts.append(f"each key at most {n} (busiest {busiest})")
        else:
            parts.append(f"key {key!r} {used_text(limit.keys_used.get(key, 0), n)}")
    return "; ".join(parts)


def add_parser(qsub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``queue limit`` on the ``queue`` command's actions ``qsub``."""
    p = qsub.add_parser(
        "limit",
        parents=[common],
        help="at most N jobs of the queue (or of one key) claimed at once, every worker",
    )
    p.add_argument("name", metavar="NAME", help="the queue")
    p.add_argument("n", metavar="N", nargs="?", type=_count, help="the limit (0: no claims)")
    p.add_argument(
        "--key",
        metavar="K",
        help=f"the limit of one limit key (alkstore_limit_key); {EVERY_KEY!r}: of every key",
    )
    p.add_argument("--clear", action="store_true", help="remove the limit")
    p.set_defaults(func=cmd_limit)
