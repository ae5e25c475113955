"""``queue limit NAME N [--key K]`` / ``queue limit NAME --clear [--key K]``: a queue's
concurrency limit at run time; ``queue limit NAME --rate 10/s [--key K]`` /
``--clear-rate``: its rate limit; ``queue limit NAME --fair [--share K=W ...]`` /
``--clear-fair``: fair share between its keys (docs/flow-control.md); and how status
shows them."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..errors import ConfigurationError
from ..store.fair import check_share
from ..store.limits import EVERY_KEY, QueueLimit, check_key, check_limit
from ..store.rate_values import QueueRates, Rate
from ..store.rates import parse_rate
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


def _rate(text: str) -> Rate:
    """The ``--rate`` of ``queue limit``: ``N/s``, ``N/m``, ``N/h``, ``N/d`` or
    ``N/<seconds>s``, else a one-line usage error."""
    try:
        return parse_rate(text, "--rate")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _share(text: str) -> tuple[str, float]:
    """A ``--share K=W`` of ``queue limit``: a key (``*``: every key without its own)
    and a share above 0, else a one-line usage error."""
    key, sep, weight = text.rpartition("=")
    try:
        if not sep or not key:
            raise ValueError
        share = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--share must read KEY=SHARE (e.g. tenant:big=3), got {text!r}"
        ) from None
    try:
        check_key(key, "--share key")
        return key, check_share(share, f"--share {key!r}")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_choice(args: argparse.Namespace) -> None:
    """At least one of N, --clear, --rate R, --clear-rate, --fair, --clear-fair; not N
    with --clear, nor --rate with --clear-rate, nor --fair with --clear-fair; --share
    only with --fair; a valid --key."""
    limit = args.n is not None or args.clear
    rate = args.rate is not None or args.clear_rate
    fair = args.fair or args.clear_fair
    if (args.n is not None and args.clear) or (args.rate is not None and args.clear_rate):
        raise CLIError("give the limit N, or --clear (not both); --rate R or --clear-rate")
    if args.fair and args.clear_fair:
        raise CLIError("give --fair or --clear-fair (not both)")
    if args.share and not args.fair:
        raise CLIError("--share K=W goes with --fair")
    if not limit and not rate and not fair:
        raise CLIError(
            "give the limit N, or --clear (or --rate R, e.g. 10/s, or --clear-rate; "
            "or --fair, or --clear-fair)"
        )
    try:
        check_key(args.key, "--key")
    except ConfigurationError as exc:
        raise CLIError(str(exc)) from None


def cmd_limit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Set or clear the limit and/or the rate, then print the queue's limits and their
    use. A queue the store does not know (never declared, no messages) is refused: a
    typo would otherwise limit nothing."""
    _check_choice(args)
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
        elif args.n is not None:
            store.set_limit(args.name, args.n, args.key)
        if args.clear_rate:
            store.clear_rate(args.name, args.key)
        elif args.rate is not None:
            store.set_rate(args.name, args.rate, args.key)
        if args.clear_fair:
            store.clear_fair(args.name)
            out.write(f"queue {args.name!r}: not fair (claims by priority and due time)\n")
        elif args.fair:
            shares = store.set_fair(args.name, dict(args.share or []))
            out.write(f"queue {args.name!r}: fair share, {shares_text(shares)}\n")
        now = [q for q in store.limits() if q.queue == args.name]
        if args.rate is not None:
            out.write(f"{what}: at most {rate_text(args.rate)}\n")
        elif args.clear_rate:
            out.write(f"{what}: no rate\n")
        if args.n is not None:
            out.write(f"{what}: at most {args.n} claimed at once\n")
        elif args.clear and args.key is None and now and now[0].keys:
            keys = ", ".join(repr(k) for k in now[0].keys)
            out.write(
                f"{what}: no queue-wide limit; its per-key limits stay ({keys}: "
                "--clear --key K clears one)\n"
            )
        elif args.clear:
            out.write(f"{what}: no limit\n")
        for limit in now:
            out.write(describe(limit) + "\n")
    finally:
        store.close()
    return 0


def used_text(used: int, limit: int | None) -> str:
    """``3/8`` (3 claimed of 8), or ``3`` with no limit."""
    return str(used) if limit is None else f"{used}/{limit}"


def rate_text(rate: Rate) -> str:
    """``10 claims per 1 s`` (what ``--rate 10/s`` means, said in full)."""
    return f"{rate.n} claims per {rate.per:g} s"


def rate_used_text(used: int, rate: Rate) -> str:
    """``3/10 per 1s``: 3 claims within the last period of a rate of 10 per second."""
    return f"{used}/{rate.n} per {rate.per:g}s"


def describe(limit: QueueLimit) -> str:
    """One line: the queue's claims against its limit and each per-key limit, then its
    claims within each rate's period."""
    parts = [f"{limit.queue}: claimed {used_text(limit.used, limit.limit)}"]
    for key, n in sorted(limit.keys.items()):
        if key == EVERY_KEY:
            busiest = max(limit.keys_used.values(), default=0)
            parts.append(f"each key at most {n} (busiest {busiest})")
        else:
            parts.append(f"key {key!r} {used_text(limit.keys_used.get(key, 0), n)}")
    if limit.rates is not None:
        parts.extend(_describe_rates(limit.rates))
    if limit.fair is not None:
        parts.append(f"fair share ({shares_text(limit.fair)})")
    return "; ".join(parts)


def shares_text(shares: dict[str, float]) -> str:
    """``shares '*' 1, 'tenant:big' 3``."""
    return "shares " + ", ".join(f"{k!r} {v:g}" for k, v in sorted(shares.items()))


def _describe_rates(rates: QueueRates) -> list[str]:
    parts = []
    if rates.rate is not None:
        parts.append(f"rate {rate_used_text(rates.used, rates.rate)}")
    for key, rate in sorted(rates.keys.items()):
        used = rates.keys_used.get(key, 0)
        if key == EVERY_KEY:
            parts.append(f"each key at most {rate} (busiest {used})")
        else:
            parts.append(f"key {key!r} rate {rate_used_text(used, rate)}")
    if rates.throttled_until is not None:
        parts.append(f"throttled until {fmt_clock(rates.throttled_until)}")
    return parts


def fmt_clock(at: float) -> str:
    """An epoch time as the local ``HH:MM:SS.s``."""
    from datetime import datetime

    return datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S.%f")[:-5]


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
    p.add_argument(
        "--rate",
        metavar="R",
        type=_rate,
        help="at most R claims per period, every worker: 10/s, 100/m, 1000/h, 5/30s",
    )
    p.add_argument("--clear-rate", action="store_true", help="remove the rate")
    p.add_argument(
        "--fair",
        action="store_true",
        help="claims take from the queue's keys in turn (weighted by --share), not by arrival",
    )
    p.add_argument(
        "--share",
        metavar="K=W",
        action="append",
        type=_share,
        help=f"with --fair: key K's share W (default 1; {EVERY_KEY!r}: every other key)",
    )
    p.add_argument("--clear-fair", action="store_true", help="claims by arrival again")
    p.set_defaults(func=cmd_limit)
