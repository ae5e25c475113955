"""``python -m celery_beat_alkstore`` / ``celery-beat-alkstore``: the schedules in a store.

    celery-beat-alkstore -b alkstore+postgresql://db/app list
    celery-beat-alkstore add nightly-report "@every 1d" proj.tasks.report --queue reports
    celery-beat-alkstore next -n 5
    celery-beat-alkstore remove nightly-report

``-b/--broker`` takes the broker URL (``alkstore+postgresql://…``, ``alkstore+sqlite:///…``
or the plain database URL), by default ``$CELERY_BROKER_URL``; ``--schema`` the store
schema (the transport option ``schema``, default ``alkstore``). A mistake prints one line
on stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, NoReturn

from kombu_alkstore.errors import AlkstoreError, ConfigurationError, SchemaMissing

PROG = "celery-beat-alkstore"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Manage the beat schedules kept in an alkstore store.")
    p.add_argument(
        "-b",
        "--broker",
        default=os.environ.get("CELERY_BROKER_URL"),
        help="broker or database URL (default: $CELERY_BROKER_URL)",
    )
    p.add_argument("--schema", default="alkstore", help="store schema (default: alkstore)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    ls = sub.add_parser("list", help="list the schedules")
    ls.add_argument("--json", action="store_true", help="print JSON")
    add = sub.add_parser("add", help="create or update a schedule")
    add.add_argument("name")
    add.add_argument("spec", help="'@every <n><unit>', unit s, m, h or d")
    add.add_argument("task", help="the task name")
    add.add_argument("--args", default="[]", help="positional arguments, a JSON list")
    add.add_argument("--kwargs", default="{}", help="keyword arguments, a JSON object")
    add.add_argument("--queue", help="the queue to send to")
    add.add_argument("--priority", type=int, help="message priority 0-255")
    add.add_argument("--expires", type=float, help="seconds after each fire the task expires")
    rm = sub.add_parser("remove", help="remove a schedule")
    rm.add_argument("name")
    nxt = sub.add_parser("next", help="the upcoming boundaries")
    nxt.add_argument("-n", type=int, default=10, help="how many (default 10)")
    nxt.add_argument("name", nargs="?", help="only this schedule")
    return p


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def _json_arg(text: str, what: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--{what} is not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, kind):
        noun = "a JSON list" if kind is list else "a JSON object"
        raise ConfigurationError(f"--{what} must be {noun}, got {text!r}")
    return value


def _open(args: argparse.Namespace, create: bool) -> Any:
    from kombu_alkstore.store import open_store

    url = args.broker
    if not url:
        raise ConfigurationError("no broker URL: pass -b/--broker or set CELERY_BROKER_URL")
    if url.startswith("alkstore+"):
        url = url[len("alkstore+") :]
    return open_store(url, schema=args.schema, setup=create)


def _list(store: Any, args: argparse.Namespace) -> int:
    from .api import list_schedules

    schedules = list_schedules(store=store)
    if args.json:
        print(json.dumps([s.__dict__ for s in schedules], indent=2, default=str))
        return 0
    if not schedules:
        print("no schedules")
        return 0
    rows = [("NAME", "SPEC", "TASK", "NEXT (UTC)", "ORIGIN", "OPTIONS")]
    for s in schedules:
        opts = json.dumps(s.options, default=str) if s.options else "-"
        rows.append((s.name, s.spec, s.task, _iso(s.next_at), s.origin, opts))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    return 0


def _add(store: Any, args: argparse.Namespace) -> int:
    from .api import schedule

    options: dict[str, Any] = {}
    if args.queue is not None:
        options["queue"] = args.queue
    if args.priority is not None:
        options["priority"] = args.priority
    if args.expires is not None:
        options["expires"] = args.expires
    s = schedule(
        args.name,
        args.spec,
        args.task,
        _json_arg(args.args, "args", list),
        _json_arg(args.kwargs, "kwargs", dict),
        options,
        store=store,
    )
    print(f"scheduled {s.name!r}: {s.spec} -> {s.task}, next at {_iso(s.next_at)}")
    return 0


def _remove(store: Any, args: argparse.Namespace) -> int:
    from .api import unschedule

    if unschedule(args.name, store=store):
        print(f"removed {args.name!r}")
        return 0
    print(f"{PROG}: error: no schedule named {args.name!r}", file=sys.stderr)
    return 1


def _next(store: Any, args: argparse.Namespace) -> int:
    from .api import list_schedules, upcoming

    if args.n < 1:
        raise ConfigurationError(f"-n must be at least 1, got {args.n}")
    schedules = list_schedules(store=store)
    if args.name is not None:
        schedules = [s for s in schedules if s.name == args.name]
        if not schedules:
            print(f"{PROG}: error: no schedule named {args.name!r}", file=sys.stderr)
            return 1
    if not schedules:
        print("no schedules")
        return 0
    now = time.time()
    for at, s in upcoming(schedules, args.n):
        when = f"overdue by {now - at:.1f}s" if at <= now else f"in {at - now:.1f}s"
        print(f"{_iso(at)}  {s.name}  {s.task}  ({when})")
    return 0


COMMANDS = {"list": _list, "add": _add, "remove": _remove, "next": _next}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is required: list, add, remove or next")
    try:
        store = _open(args, create=args.command == "add")
        try:
            return COMMANDS[args.command](store, args)
        finally:
            store.close()
    except SchemaMissing as exc:
        _fail(f"{exc} (wrong --schema?)")
    except (AlkstoreError, ValueError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a driver error: still one line, never a traceback
        _fail(f"{type(exc).__name__}: {exc}")
    return 1


def _fail(message: str) -> None:
    print(f"{PROG}: error: " + " ".join(message.split()), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
