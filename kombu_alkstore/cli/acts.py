"""``acts``: the operators' acts on record (store/acts.py), and the ``--by``/``--reason``
options every acting command takes.

Each acting command (``dead requeue``, ``dead purge``, ``queue pause``, ``queue
resume``) writes its act in the transaction of its change, as ``--by`` (default: the OS
user name) for ``--reason``; a command that changes nothing writes none.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import time
from datetime import datetime
from typing import Any, TextIO

from ..present import fmt_time
from ..store.acts import ACT_NAMES, ActFilter, Actor
from .connection import open_cli_store
from .errors import CLIError
from .output import table

#: Job ids a line of ``acts`` shows at most (``--json`` has every id the act keeps).
SHOWN_IDS = 5
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def os_user() -> str:
    """The OS user name running the command (``$USER`` when the system has none)."""
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): the environment's, or unknown
        return os.environ.get("USER") or f"uid:{os.getuid()}"


def add_actor_options(parser: argparse.ArgumentParser) -> None:
    """``--by WHO`` and ``--reason WHY`` of an acting command."""
    parser.add_argument(
        "--by",
        metavar="WHO",
        help="who acts, kept with the act (default: the OS user name)",
    )
    parser.add_argument(
        "--reason",
        metavar="WHY",
        help="why, kept with the act: a code such as a ticket id (at most 200 characters, "
        "one line)",
    )


def actor_of(args: argparse.Namespace) -> Actor:
    """The :class:`Actor` of an acting command's ``--by``/``--reason``; CLIError when the
    store would refuse it (empty, too long, a line break or a control character)."""
    by = getattr(args, "by", None)
    by = os_user() if by is None else by
    try:
        return Actor(by, getattr(args, "reason", None)).checked()
    except Exception as exc:
        raise CLIError(str(exc)) from None


def parse_since(text: str) -> float:
    """Epoch seconds from ``2h``/``30m``/``7d`` ago, an ISO time (local unless it has an
    offset) or epoch seconds; CLIError for anything else."""
    text = text.strip()
    ago = _AGO.match(text)
    if ago:
        return time.time() - float(ago.group(1)) * _UNITS[ago.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise CLIError(
            f"--since {text!r}: give a time ago (30m, 2h, 7d), an ISO time "
            "(2026-12-01T09:00) or epoch seconds"
        ) from None


def _ids_cell(ids: tuple[int, ...], count: int | None) -> str:
    if not ids:
        return "-"
    shown = ",".join(str(i) for i in ids[:SHOWN_IDS])
    more = (count or len(ids)) - min(len(ids), SHOWN_IDS)
    return f"{shown},… (+{more})" if more > 0 else shown


def _text(value: str | None) -> str:
    """A stored text for a terminal: control characters shown as ``?``."""
    if value is None:
        return "-"
    return "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in value)


def cmd_acts(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The acts matching the filters, newest first, at most ``--limit``."""
    if args.limit < 1:
        raise CLIError(f"--limit must be at least 1, got {args.limit}")
    if args.act is not None and args.act not in ACT_NAMES:
        raise CLIError(f"--act {args.act!r}: one of {', '.join(ACT_NAMES)}")
    since = parse_since(args.since) if args.since else None
    where = ActFilter(queue=args.queue, by=args.by, act=args.act, since=since)
    store = open_cli_store(args)
    try:
        acts = store.acts(where, limit=args.limit)
    finally:
        store.close()
    if args.json:
        out.write(json.dumps([a.as_dict() for a in acts]) + "\n")
        return 0
    if not acts:
        out.write("no acts on record" + (" matching the filters" if _filtered(args) else "") + "\n")
        return 0
    rows = [
        [
            str(a.id),
            fmt_time(a.at),
            a.act,
            _text(a.actor),
            _text(a.queue) + (f" -> {_text(a.target)}" if a.target else ""),
            "-" if a.count is None else str(a.count),
            _ids_cell(a.ids, a.count),
            _text(a.reason),
        ]
        for a in acts
    ]
    headers = ["ID", "AT", "ACT", "BY", "QUEUE", "JOBS", "IDS", "REASON"]
    out.write(table(rows, headers, right=(0, 5)) + "\n")
    if len(acts) == args.limit:
        out.write(f"(first {args.limit}, newest first; use --limit to see more)\n")
    return 0


def _filtered(args: argparse.Namespace) -> bool:
    return any(getattr(args, k) for k in ("queue", "by", "act", "since"))


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``acts`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "acts",
        parents=[common],
        help="the operators' acts on record (requeues, purges, pauses...), newest first",
    )
    p.add_argument("--queue", metavar="Q", help="only acts on this queue")
    p.add_argument("--by", metavar="WHO", help="only acts of this actor")
    p.add_argument("--act", metavar="NAME", help=f"only this act ({', '.join(ACT_NAMES)})")
    p.add_argument(
        "--since", metavar="WHEN", help="only acts since WHEN: 30m, 2h, 7d ago, an ISO time"
    )
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_acts)
