"""``python -m celery_beat_alkstore`` / ``celery-beat-alkstore``: the schedules in a store.

    celery-beat-alkstore -b alkstore+postgresql://db/app list
    celery-beat-alkstore -A proj add report "cron 30 7 * * mon-fri Europe/Paris" proj.tasks.report
    celery-beat-alkstore next                      # each schedule's next run
    celery-beat-alkstore next report --count 5 --after 2026-03-28T00:00:00Z
    celery-beat-alkstore disable report | enable report | run-now report
    celery-beat-alkstore remove report

``-b/--broker`` takes the broker URL (``alkstore+postgresql://…``, ``alkstore+sqlite:///…``
or the plain database URL), by default the app's (``-A``) or ``$CELERY_BROKER_URL``;
``--schema`` the store schema (the transport option ``schema``; default ``$ALKSTORE_SCHEMA``,
else the app's, else ``alkstore``): with ``-A``, the store beat itself uses.
``-A/--app`` names the Celery app (as ``celery -A``): ``add`` checks the task name against
its registry and reads cron specs without a zone in its time zone. A mistake prints one
line on stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, NoReturn

from kombu_alkstore.errors import AlkstoreError, ConfigurationError, SchemaMissing

from .cron import utc_iso
from .policy import POLICIES
from .spec import GRAMMAR

PROG = "celery-beat-alkstore"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Manage the beat schedules kept in an alkstore store.")
    p.add_argument(
        "-b",
        "--broker",
        default=None,
        help="broker or database URL (default: the app's with -A, else $CELERY_BROKER_URL)",
    )
    p.add_argument(
        "--schema",
        default=None,
        help="store schema (default: $ALKSTORE_SCHEMA, else the app's with -A, else alkstore)",
    )
    p.add_argument("-A", "--app", help="the Celery app (as celery -A), to check task names")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    ls = sub.add_parser("list", help="list the schedules")
    ls.add_argument("--json", action="store_true", help="print JSON")
    add = sub.add_parser("add", help="create or update a schedule")
    add.add_argument("name")
    add.add_argument("spec", help=f"the schedule: {GRAMMAR}")
    add.add_argument("task", help="the task name")
    add.add_argument("--tz", help="time zone of a cron spec naming none (default: the app's)")
    add.add_argument(
        "--skip-task-check",
        action="store_true",
        help="do not check the task name against the app's registry",
    )
    add.add_argument("--args", default="[]", help="positional arguments, a JSON list")
    add.add_argument("--kwargs", default="{}", help="keyword arguments, a JSON object")
    add.add_argument("--queue", help="the queue to send to")
    add.add_argument("--priority", type=int, help="message priority 0-255")
    add.add_argument("--expires", type=float, help="seconds after each fire the task expires")
    add.add_argument(
        "--catch-up",
        choices=POLICIES,
        default=None,
        help="several boundaries due at once (after downtime): once (one run), replay "
        "(each, up to 64) or skip (none); default: the beat's beat_alkstore_catch_up (once)",
    )
    add.add_argument(
        "--no-stacking",
        action="store_true",
        help="skip a due time (counted) while the previous run is still queued or running",
    )
    for cmd, text in (
        ("remove", "remove a schedule"),
        ("enable", "fire a disabled schedule again, from its next boundary"),
        ("disable", "stop firing a schedule (it keeps its grid)"),
        ("run-now", "one extra run by the running beat (the grid untouched)"),
    ):
        sub.add_parser(cmd, help=text).add_argument("name")
    nxt = sub.add_parser(
        "next",
        help="each schedule's next run (-n: its next N), soonest first; with NAME, its next "
        "10 (-n N) as one UTC ISO-8601 timestamp per line",
    )
    nxt.add_argument(
        "-n",
        "--count",
        dest="n",
        type=int,
        default=None,
        help="how many per schedule (1 each; 10 with NAME)",
    )
    nxt.add_argument("--after", help="boundaries after this ISO-8601 instant (naive: UTC)")
    nxt.add_argument("name", nargs="?", help="only this schedule")
    return p


def _iso(epoch: float | None) -> str:
    return "-" if epoch is None else utc_iso(epoch)


def _instant(text: str) -> float:
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"--after {text!r} is not an ISO-8601 date-time (e.g. 2026-03-29T01:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _load_app(args: argparse.Namespace) -> Any:
    if not args.app:
        return None
    from celery.app.utils import find_app

    try:
        app = find_app(args.app)
    except Exception as exc:  # ImportError, AttributeError, a broken module
        raise ConfigurationError(f"-A {args.app!r}: {type(exc).__name__}: {exc}") from None
    app.loader.import_default_modules()
    return app


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

    # Where beat looks: an explicit -b/--schema, else the app's own broker URL and schema
    # (which Celery reads from $CELERY_BROKER_URL when set), else the environment.
    app = args.celery_app
    url = args.broker
    schema = args.schema or os.environ.get("ALKSTORE_SCHEMA") or None
    if app is not None and not url:
        from .api import store_target

        target = store_target(app)
        return open_store(target.url, schema=schema or target.options.schema, setup=create)
    url = url or os.environ.get("CELERY_BROKER_URL")
    if not url:
        raise ConfigurationError(
            "no broker URL: pass -b/--broker or -A/--app, or set CELERY_BROKER_URL"
        )
    if url.startswith("alkstore+"):
        url = url[len("alkstore+") :]
    return open_store(url, schema=schema or "alkstore", setup=create)


def _list(store: Any, args: argparse.Namespace) -> int:
    from .api import list_schedules

    schedules = list_schedules(store=store)
    if args.json:
        print(json.dumps([schedule_json(s) for s in schedules], indent=2, default=str))
        return 0
    if not schedules:
        print("no schedules")
        return 0
    rows = [
        ("NAME", "SPEC", "TASK", "NEXT (UTC)", "STATE", "RUNS", "LAST RUN (UTC)", "ORIGIN")
        + ("CATCH-UP", "STACKING", "SKIPPED", "OPTIONS / LAST ERROR")
    ]
    for s in schedules:
        extra = json.dumps(s.options, default=str) if s.options else "-"
        if s.last_error:
            extra += f"  error: {s.last_error}"
        state = ("enabled" if s.enabled else "disabled") + (
            " +run-now" if s.run_requested is not None else ""
        )
        rows.append(
            (
                s.name,
                s.display,
                s.task,
                _iso(s.next_at),
                state,
                str(s.run_count),
                _iso(s.last_run_at),
                s.origin,
                s.catch_up or "default",
                "no" if s.no_stacking else "yes",
                str(s.skipped),
                extra,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    return 0


#: The times of ``list --json``: UTC ISO-8601 strings as the text output prints them
#: (null when there is none), not epoch seconds.
JSON_TIMES = ("next_at", "last_run_at", "run_requested")


def schedule_json(s: Any) -> dict[str, Any]:
    """A schedule as ``list --json`` prints it: every stored field, times as
    :data:`JSON_TIMES` says."""
    out = dict(s.__dict__)
    for key in JSON_TIMES:
        out[key] = None if out[key] is None else utc_iso(out[key])
    return out


def from_config(store: Any, args: argparse.Namespace, name: str) -> bool:
    """True when ``name`` is an entry of the app's ``beat_schedule``: stored by a beat
    from the config (origin ``config``), or named in the ``-A`` app's ``beat_schedule``.
    Every beat start stores those entries again (``AlkstoreScheduler.setup_schedule``)."""
    from .api import ORIGIN_CONFIG, get_schedule

    app = args.celery_app
    if app is not None and name in (app.conf.beat_schedule or {}):
        return True
    stored = get_schedule(name, store=store)
    return stored is not None and stored.origin == ORIGIN_CONFIG


def _note(text: str) -> None:
    print(f"{PROG}: note: {text}", file=sys.stderr)


def _add(store: Any, args: argparse.Namespace) -> int:
    from .api import make_row, schedule

    options: dict[str, Any] = {}
    if args.queue is not None:
        options["queue"] = args.queue
    if args.priority is not None:
        options["priority"] = args.priority
    if args.expires is not None:
        options["expires"] = args.expires
    app = args.celery_app
    positional = _json_arg(args.args, "args", list)
    keywords = _json_arg(args.kwargs, "kwargs", dict)
    if app is None and not args.skip_task_check:
        make_row(
            args.name,
            args.spec,
            args.task,
            positional,
            keywords,
            options,
            tz=args.tz,
            catch_up=args.catch_up,
            no_stacking=args.no_stacking,
        )
        raise ConfigurationError(
            f"cannot check the task name {args.task!r} without the app: pass -A/--app "
            "(the Celery app, as celery -A) or --skip-task-check"
        )
    configured = from_config(store, args, args.name)
    s = schedule(
        args.name,
        args.spec,
        args.task,
        positional,
        keywords,
        options,
        tz=args.tz,
        catch_up=args.catch_up,
        no_stacking=args.no_stacking,
        check_task=not args.skip_task_check,
        app=app,
        store=store,
    )
    policy = f"catch-up {s.catch_up or 'default'}" + (", no stacking" if s.no_stacking else "")
    print(f"scheduled {s.name!r}: {s.display} -> {s.task}, next at {_iso(s.next_at)} ({policy})")
    if configured:
        _note(
            f"{s.name!r} is an entry of the app's beat_schedule: the next beat start puts "
            "the config's version back (change beat_schedule to keep this)"
        )
    return 0


def _lifecycle(store: Any, args: argparse.Namespace) -> int:
    from .api import disable, enable, run_now

    act = {"enable": enable, "disable": disable, "run-now": run_now}[args.command]
    if not act(args.name, store=store):
        print(f"{PROG}: error: no schedule named {args.name!r}", file=sys.stderr)
        return 1
    done = {"enable": "enabled", "disable": "disabled", "run-now": "run requested for"}
    print(f"{done[args.command]} {args.name!r}")
    return 0


def _remove(store: Any, args: argparse.Namespace) -> int:
    from .api import unschedule

    configured = from_config(store, args, args.name)
    if unschedule(args.name, store=store):
        print(f"removed {args.name!r}")
        if configured:
            _note(
                f"{args.name!r} is an entry of the app's beat_schedule: the next beat start "
                "stores it again (remove it from beat_schedule to remove it for good)"
            )
        return 0
    print(f"{PROG}: error: no schedule named {args.name!r}", file=sys.stderr)
    return 1


def _next(store: Any, args: argparse.Namespace) -> int:
    """With NAME, its next ``-n`` (10) boundaries, timestamps only (scriptable). Without,
    every schedule's next ``-n`` (1) boundaries, the schedules by their next one, so a
    frequent schedule never hides a daily one; disabled schedules last, marked so."""
    from .api import list_schedules

    if args.n is not None and args.n < 1:
        raise ConfigurationError(f"-n/--count must be at least 1, got {args.n}")
    after = None if args.after is None else _instant(args.after)
    schedules = list_schedules(store=store)
    if args.name is not None:
        schedules = [s for s in schedules if s.name == args.name]
        if not schedules:
            print(f"{PROG}: error: no schedule named {args.name!r}", file=sys.stderr)
            return 1
        for at in schedules[0].boundaries(args.n or 10, after):  # scriptable: timestamps only
            print(utc_iso(at))
        return 0
    if not schedules:
        print("no schedules")
        return 0
    now = store.schedule_clock()
    enabled = [(s.boundaries(args.n or 1, after), s) for s in schedules if s.enabled]
    enabled.sort(key=lambda pair: (pair[0][0], pair[1].name))
    width = max(len(s.name) for s in schedules)
    for times, s in enabled:
        for at in times:
            when = f"overdue by {now - at:.1f}s" if at <= now else f"in {at - now:.1f}s"
            print(f"{_iso(at)}  {s.name:<{width}}  {s.task}  ({when})")
    for s in schedules:
        if not s.enabled:
            print(f"{'-':<20}  {s.name:<{width}}  {s.task}  (disabled)")
    return 0


COMMANDS = {
    "list": _list,
    "add": _add,
    "remove": _remove,
    "next": _next,
    "enable": _lifecycle,
    "disable": _lifecycle,
    "run-now": _lifecycle,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error(f"a command is required: {', '.join(COMMANDS)}")
    try:
        args.celery_app = _load_app(args)
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
