"""Operator CLI: ``kombu-alkstore`` / ``python -m kombu_alkstore``.

Commands (``-b/--broker URL`` as ``celery`` spells it, default ``$CELERY_BROKER_URL``)::

    status [--queue Q] [--watch [SECONDS]] [--json]   per-queue counts
    dead list [--queue Q] [--limit N] [--json]        one line per dead letter
    dead show ID [--json]                             one dead letter, Celery body decoded
    dead requeue (ID... | --queue Q | --all)          back to pending, attempts reset
    dead purge (ID... | --queue Q | --all)            delete for good
    setup [--print [--grant ROLE]]                    apply (or print) the DDL
    sweep                                             run one maintenance sweep now
    queue pause|resume NAME                           stop/restart claims of a queue
    web [--host H] [--port P]                         the dashboard and /metrics

Every error a user can cause (bad URL, unreachable database, unknown id, missing
tables) is one line on stderr and exit status 1; never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any, TextIO

PROG = "kombu-alkstore"
EXIT_ERROR = 1
EXIT_USAGE = 2
#: Dead letters moved per statement by ``dead requeue --queue/--all``.
REQUEUE_BATCH = 1000
#: URL schemes that are a database URL already (``postgresql+psycopg://`` names a driver).
DATABASE_SCHEMES = frozenset({"postgresql", "postgres", "sqlite"})


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


# --------------------------------------------------------------------------- URLs
def store_url(broker: str | None) -> str:
    """The database URL inside a broker URL (``alkstore+postgresql://…`` → ``postgresql://…``)."""
    if not broker:
        raise CLIError("no broker URL: pass -b/--broker URL or set CELERY_BROKER_URL")
    broker = broker.strip()
    scheme, sep, _ = broker.partition("://")
    if not sep:
        raise CLIError(
            f"bad broker URL {broker!r}: expected alkstore+postgresql://… or alkstore+sqlite:///…"
        )
    if "+" in scheme and scheme.partition("+")[0] not in DATABASE_SCHEMES:
        transport, _, rest = broker.partition("+")
        if transport != "alkstore":
            raise CLIError(
                f"broker URL {_mask(broker)!r} is for the {transport!r} transport, "
                "not alkstore (use alkstore+postgresql://… or alkstore+sqlite:///…)"
            )
        broker = rest
    return broker


def _mask(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        prefix = ""
        if "+" in url.partition("://")[0] and url.startswith("alkstore+"):
            prefix, url = "alkstore+", url[len("alkstore+") :]
        return prefix + make_url(url).render_as_string(hide_password=True)
    except Exception:  # unparseable: show it without any password-looking part
        head, at, tail = url.rpartition("@")
        return f"{head.split(':')[0]}:***@{tail}" if at else url


def parse(url: str):
    from .store.options import parse_store_url

    return parse_store_url(url)


def open_cli_store(args: argparse.Namespace, setup: bool = False):
    """Open the store named by ``-b`` without creating anything (unless ``setup``)."""
    from .store import open_store
    from .store.options import validate_identifier

    validate_identifier(args.schema, "schema")
    return open_store(parse(store_url(args.broker)), schema=args.schema, setup=setup)


# ------------------------------------------------------------------- formatting
def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S%z")


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def one_line(text: str | None, width: int | None = None) -> str:
    text = " ".join((text or "").split())
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def table(rows: list[list[str]], headers: list[str], right: Sequence[int] = ()) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell if last else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


# ------------------------------------------------------------ message decoding
def decode(body: bytes) -> dict[str, Any]:
    """What a stored message says: task name, id, args, kwargs, headers (Celery protocol 1/2).

    Only JSON bodies are decoded; other serializers (pickle, yaml, msgpack) are reported by
    content type and size and never deserialized here.
    """
    out: dict[str, Any] = {"task": None, "task_id": None, "headers": {}, "properties": {}}
    try:
        envelope = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError) as exc:
        out["error"] = f"not a kombu message envelope: {exc}"
        return out
    if not isinstance(envelope, dict):
        out["error"] = "not a kombu message envelope"
        return out
    headers = envelope.get("headers") or {}
    props = envelope.get("properties") or {}
    out["headers"], out["properties"] = headers, props
    out["content_type"] = envelope.get("content-type")
    out["task"] = headers.get("task")
    out["task_id"] = headers.get("id") or props.get("correlation_id")
    raw = envelope.get("body")
    try:
        if props.get("body_encoding") == "base64" and isinstance(raw, str):
            raw = base64.b64decode(raw)
        if isinstance(raw, str):
            raw = raw.encode(envelope.get("content-encoding") or "utf-8")
    except (ValueError, TypeError) as exc:
        out["error"] = f"body is not valid base64: {exc}"
        return out
    out["body_size"] = len(raw or b"")
    if out["content_type"] != "application/json":
        out["body_note"] = f"{out['body_size']} bytes of {out['content_type']}, not decoded"
        return out
    try:
        payload = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        out["error"] = f"body is not valid JSON: {exc}"
        return out
    if isinstance(payload, list) and len(payload) == 3 and isinstance(payload[1], dict):
        out["args"], out["kwargs"], out["embed"] = payload  # Celery protocol 2
    elif isinstance(payload, dict) and "task" in payload:  # Celery protocol 1
        out["task"] = out["task"] or payload.get("task")
        out["task_id"] = out["task_id"] or payload.get("id")
        out["args"], out["kwargs"] = payload.get("args"), payload.get("kwargs")
    else:
        out["payload"] = payload
    return out


def job_dict(job, decoded: dict[str, Any] | None = None) -> dict[str, Any]:
    d = asdict(job)
    d.pop("body")
    decoded = decoded if decoded is not None else decode(job.body)
    d["task"] = decoded.get("task")
    d["task_id"] = decoded.get("task_id") or job.msg_id
    return d


# --------------------------------------------------------------------- commands
def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    store = open_cli_store(args)
    try:
        rounds = 0
        while True:
            counts = store.counts(args.queue or None)
            rendered = render_status(counts, args, store)
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


def render_status(counts, args: argparse.Namespace, store) -> str:
    if args.json:
        return json.dumps([asdict(c) for c in counts])
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
    if not rows:
        return f"{head}\nno messages in any queue"
    totals = [
        sum(getattr(c, f) for c in counts) for f in ("pending", "delayed", "processing", "dead")
    ]
    if len(rows) > 1:
        oldest = max((c.oldest_age for c in counts if c.oldest_age is not None), default=None)
        rows.append(["(total)", *(str(t) for t in totals), fmt_age(oldest)])
    body = table(
        rows,
        ["QUEUE", "PENDING", "DELAYED", "PROCESSING", "DEAD", "OLDEST"],
        right=(1, 2, 3, 4, 5),
    )
    return f"{head}\n{body}"


def list_jobs(
    args: argparse.Namespace,
    out: TextIO,
    read: Callable[[Any], list],
    what: str,
    columns: list[tuple[str, Callable[[Any, dict[str, Any]], str]]],
    order: str,
    right: tuple[int, ...] = (),
) -> int:
    """One line per job ``read(store)`` returns (``--queue``, ``--limit``, ``--json``)."""
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


def _task_id(j: Any, d: dict[str, Any]) -> str:
    return str(d.get("task_id") or j.msg_id or "-")


def _task(j: Any, d: dict[str, Any]) -> str:
    return str(d.get("task") or "-")


def cmd_dead_list(args: argparse.Namespace, out: TextIO) -> int:
    columns = [
        ("ID", lambda j, d: str(j.id)),
        ("TASK ID", _task_id),
        ("TASK", _task),
        ("QUEUE", lambda j, d: j.queue),
        ("ATTEMPTS", lambda j, d: f"{j.attempts}/{j.max_attempts}"),
        ("DIED AT", lambda j, d: fmt_time(j.died_at)),
        ("LAST ERROR", lambda j, d: one_line(j.last_error, 80)),
    ]
    return list_jobs(
        args,
        out,
        lambda store: store.dead_list(queue=args.queue, limit=args.limit),
        "dead letters",
        columns,
        "newest first",
        right=(0,),
    )


def cmd_scheduled(args: argparse.Namespace, out: TextIO) -> int:
    """Delayed tasks (ETA, countdown) held by the broker, soonest first: what
    ``celery inspect scheduled`` cannot list here, since workers do not hold them."""
    columns = [
        ("ETA", lambda j, d: fmt_time(j.run_at)),
        ("TASK", _task),
        ("TASK ID", _task_id),
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


def find_job(store, ident: str):
    """A job by its own id (digits) or by the Celery task id; CLIError when unknown."""
    job = None
    if ident.isdigit():
        job = store.get_job(int(ident))
    if job is None:
        job = store.get_job(ident)
    if job is None:
        raise CLIError(f"no dead letter or message with id or task id {ident!r}")
    return job


def cmd_dead_show(args: argparse.Namespace, out: TextIO) -> int:
    store = open_cli_store(args)
    try:
        job = find_job(store, args.id)
    finally:
        store.close()
    d = decode(job.body)
    if args.json:
        info = job_dict(job, d)
        for key in ("args", "kwargs", "embed", "headers", "properties", "payload", "error"):
            if key in d:
                info[key] = d[key]
        out.write(json.dumps(info, default=str) + "\n")
        return 0
    what = "dead letter" if job.state == "dead" else f"message ({job.state}, not dead)"
    lines = [
        f"{what} {job.id} in queue {job.queue!r}",
        f"  task:        {d.get('task') or '-'}",
        f"  task id:     {d.get('task_id') or job.msg_id or '-'}",
        f"  attempts:    {job.attempts}/{job.max_attempts}",
        f"  priority:    {job.priority}",
        f"  created at:  {fmt_time(job.created_at)}",
    ]
    if job.state == "dead":
        lines.append(f"  died at:     {fmt_time(job.died_at)}")
        error = (job.last_error or "").rstrip().replace("\n", "\n" + " " * 15)
        lines.append(f"  last error:  {error}")
    else:
        lines.append(f"  run at:      {fmt_time(job.run_at)}")
    if job.expires_at is not None:
        lines.append(f"  expires at:  {fmt_time(job.expires_at)}")
    if "args" in d:
        lines.append(f"  args:        {json.dumps(d['args'])}")
        lines.append(f"  kwargs:      {json.dumps(d['kwargs'])}")
    if "payload" in d:
        lines.append(f"  body:        {json.dumps(d['payload'])}")
    if "body_note" in d:
        lines.append(f"  body:        {d['body_note']}")
    if "error" in d:
        lines.append(f"  undecodable: {d['error']}")
    if d.get("headers"):
        lines.append("  headers:")
        for key in sorted(d["headers"]):
            lines.append(f"    {key}: {json.dumps(d['headers'][key], default=str)}")
    out.write("\n".join(lines) + "\n")
    return 0


def resolve_dead_ids(store, idents: list[str]) -> list[int]:
    ids = []
    for ident in idents:
        job = find_job(store, ident)
        if job.state != "dead":
            raise CLIError(f"message {ident!r} (id {job.id}) is {job.state}, not a dead letter")
        ids.append(job.id)
    return list(dict.fromkeys(ids))


def _selection(args: argparse.Namespace) -> str:
    chosen = [bool(args.ids), args.queue is not None, args.all]
    if sum(chosen) != 1:
        raise CLIError(
            f"dead {args.dead_command}: give dead-letter ids, or --queue QUEUE, or --all "
            "(exactly one of them)"
        )
    return "ids" if args.ids else ("queue" if args.queue is not None else "all")


def cmd_dead_requeue(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    how = _selection(args)
    if args.batch < 1:
        raise CLIError(f"--batch must be at least 1, got {args.batch}")
    store = open_cli_store(args)
    try:
        if how == "ids":
            ids = resolve_dead_ids(store, args.ids)
            moved = store.dead_requeue(ids=ids)
            out.write(f"requeued {moved} dead letter{'s' if moved != 1 else ''}\n")
            return 0
        ids = dead_ids(store, args.queue)
        total = len(ids)
        where = f" of queue {args.queue!r}" if args.queue is not None else ""
        if not total:
            out.write(f"no dead letters{where} to requeue\n")
            return 0
        progress = Progress(total, err, "requeued", args.batch)
        moved = 0
        for start in range(0, total, args.batch):
            moved += store.dead_requeue(ids=ids[start : start + args.batch])
            progress.update(min(start + args.batch, total))
        progress.done()
        out.write(f"requeued {moved} dead letter{'s' if moved != 1 else ''}{where}\n")
        return 0
    finally:
        store.close()


def cmd_dead_purge(args: argparse.Namespace, out: TextIO) -> int:
    how = _selection(args)
    store = open_cli_store(args)
    try:
        if how == "ids":
            gone = store.dead_purge(ids=resolve_dead_ids(store, args.ids))
        else:
            gone = store.dead_purge(queue=args.queue)
    finally:
        store.close()
    where = f" of queue {args.queue!r}" if args.queue is not None else ""
    out.write(f"purged {gone} dead letter{'s' if gone != 1 else ''}{where}\n")
    return 0


def dead_ids(store, queue: str | None, page: int = 10_000) -> list[int]:
    """Ids of the dead letters (of ``queue``) as they are now, ascending.

    Read once up front, so a message that dies again while the batches run is not
    requeued a second time by the same command.
    """
    from .store.admin import DeadFilter

    where, ids = DeadFilter(queue=queue), []
    while True:
        batch = store.dead_ids(where, after=ids[-1] if ids else 0, limit=page)
        ids += batch
        if len(batch) < page:
            return ids


class Progress:
    """A one-line progress bar on a terminal; a line per step otherwise (for logs)."""

    width = 30

    def __init__(self, total: int, stream: TextIO, verb: str, step: int) -> None:
        self.total, self.stream, self.verb = total, stream, verb
        self.tty = stream.isatty()
        self.shown = total > step  # one batch needs no progress report

    def update(self, n: int) -> None:
        if not self.shown:
            return
        frac = n / self.total
        if self.tty:
            bar = "#" * int(frac * self.width)
            self.stream.write(f"\r[{bar:<{self.width}}] {n}/{self.total} {self.verb}")
        else:
            self.stream.write(f"{self.verb} {n}/{self.total} ({frac:.0%})\n")
        self.stream.flush()

    def done(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def cmd_setup(args: argparse.Namespace, out: TextIO) -> int:
    if args.print:
        from .store.setup_script import setup_script

        out.write(setup_script(parse(store_url(args.broker)), args.schema, args.grant))
        return 0
    if args.grant:
        raise CLIError("--grant goes with --print (apply the printed script as a migration)")
    store = open_cli_store(args, setup=True)
    try:
        version = store.schema_version()
        out.write(
            f"alkstore tables ready in {store.url.masked()} "
            f"(schema {store.options.schema}, version {version})\n"
        )
    finally:
        store.close()
    return 0


def cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    store = open_cli_store(args)
    try:
        result = store.sweep()
    finally:
        store.close()
    dropped = ", ".join(result.queues_dropped) or "none"
    out.write(
        f"expired to dead letters: {result.expired}; dead letters past retention deleted: "
        f"{result.dead_purged}; unused queues dropped: {dropped}\n"
    )
    return 0


def cmd_queue(args: argparse.Namespace, out: TextIO) -> int:
    """``queue pause|resume NAME``: claims (and hand-offs) skip a paused queue; publishes
    still land; the state is kept in the store until resumed."""
    store = open_cli_store(args)
    try:
        if args.queue_command == "pause":
            changed = store.pause_queue(args.name)
            out.write(f"queue {args.name!r} {'paused' if changed else 'was paused already'}\n")
        else:
            changed = store.resume_queue(args.name)
            out.write(f"queue {args.name!r} {'resumed' if changed else 'was not paused'}\n")
    finally:
        store.close()
    return 0


def cmd_web(args: argparse.Namespace, out: TextIO) -> int:
    """``web``: serve the dashboard until interrupted (the ``web`` extra)."""
    try:
        from .web import Config, serve
    except ImportError as exc:
        raise CLIError(
            f"the dashboard needs the web extra: pip install 'kombu-alkstore[web]' ({exc})"
        ) from None
    token = os.environ.get("ALKSTORE_WEB_TOKEN") or None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip() or None
    store = open_cli_store(args)
    broker = store_url(args.broker)
    config = Config(
        token=token,
        refresh=args.refresh,
        inspect=not args.no_inspect,
        broker_url=f"alkstore+{broker}",
    )
    mode = "write access with the token" if token else "read-only (no ALKSTORE_WEB_TOKEN)"
    out.write(f"dashboard on http://{args.host}:{args.port}/ for {store.url.masked()}: {mode}\n")
    out.flush()
    try:
        serve(store, config, host=args.host, port=args.port)
    finally:
        store.close()
    return 0


# ------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Operate a kombu-alkstore broker: queue status, dead letters, setup.",
        epilog="Broker URLs: alkstore+postgresql://user:pw@host/db, alkstore+sqlite:///file.db "
        "(the alkstore+ prefix is optional here).",
    )
    add_connection_options(parser, os.environ)
    # The same options are accepted after the command too (`setup --print -b URL`).
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "status", parents=[common], help="per-queue counts: pending, delayed, processing, dead"
    )
    p.add_argument("--queue", action="append", metavar="Q", help="only this queue (repeatable)")
    p.add_argument(
        "--watch",
        nargs="?",
        type=_positive,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "scheduled",
        parents=[common],
        help="delayed tasks (ETA, countdown) the broker holds, soonest first",
    )
    add_listing_options(p)
    p.set_defaults(func=cmd_scheduled)

    dead = sub.add_parser("dead", help="dead letters: list, show, requeue, purge")
    dsub = dead.add_subparsers(dest="dead_command", metavar="ACTION")
    dsub.required = True

    p = dsub.add_parser("list", parents=[common], help="one line per dead letter, newest first")
    add_listing_options(p)
    p.set_defaults(func=cmd_dead_list)

    p = dsub.add_parser(
        "show", parents=[common], help="one dead letter with its Celery message decoded"
    )
    p.add_argument("id", metavar="ID", help="the dead letter's id or the Celery task id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_dead_show)

    for name, helptext in (
        ("requeue", "move dead letters back to their queue (attempts reset)"),
        ("purge", "delete dead letters for good"),
    ):
        p = dsub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("ids", nargs="*", metavar="ID", help="dead-letter ids or Celery task ids")
        p.add_argument("--queue", metavar="Q", help="every dead letter of this queue")
        p.add_argument("--all", action="store_true", help="every dead letter")
        if name == "requeue":
            p.add_argument("--batch", type=int, default=REQUEUE_BATCH, help=argparse.SUPPRESS)
            p.set_defaults(func=cmd_dead_requeue)
        else:
            p.set_defaults(func=cmd_dead_purge)

    p = sub.add_parser("setup", parents=[common], help="create the tables (or --print their DDL)")
    p.add_argument(
        "--print",
        action="store_true",
        help="print the idempotent DDL (for a migration) instead of applying it",
    )
    p.add_argument(
        "--grant",
        metavar="ROLE",
        help="with --print on PostgreSQL: add the GRANTs a runtime ROLE needs",
    )
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser(
        "sweep",
        parents=[common],
        help="expire messages, apply dead-letter retention, drop unused queues (workers "
        "do this every sweep_interval; this runs it once)",
    )
    p.set_defaults(func=cmd_sweep)

    queue = sub.add_parser("queue", help="pause or resume a queue")
    qsub = queue.add_subparsers(dest="queue_command", metavar="ACTION")
    qsub.required = True
    for name, helptext in (
        ("pause", "claims and hand-offs skip the queue; publishes still land"),
        ("resume", "claims of the queue start again"),
    ):
        p = qsub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("name", metavar="NAME", help="the queue")
        p.set_defaults(func=cmd_queue)

    p = sub.add_parser(
        "web",
        parents=[common],
        help="the dashboard and Prometheus /metrics (read-only unless $ALKSTORE_WEB_TOKEN)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the write-access token (else $ALKSTORE_WEB_TOKEN; none: read-only)",
    )
    p.add_argument(
        "--refresh", type=_positive, default=5.0, help="seconds between count refreshes (5)"
    )
    p.add_argument(
        "--no-inspect",
        action="store_true",
        help="do not ask Celery workers (inspect active/reserved) for the consumers page",
    )
    p.set_defaults(func=cmd_web)
    return parser


def add_connection_options(parser: argparse.ArgumentParser, environ: Any) -> None:
    """``-b/--broker`` and ``--schema``; with ``environ=None`` they default to nothing, so a
    subcommand's copy never overrides a value given before the command."""
    suppress = environ is None
    parser.add_argument(
        "-b",
        "--broker",
        default=argparse.SUPPRESS if suppress else environ.get("CELERY_BROKER_URL"),
        metavar="URL",
        help="broker URL (default: $CELERY_BROKER_URL)",
    )
    parser.add_argument(
        "--schema",
        default=argparse.SUPPRESS if suppress else environ.get("ALKSTORE_SCHEMA", "alkstore"),
        help="store schema, the transport option `schema` (default: $ALKSTORE_SCHEMA or alkstore)",
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _error_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; return the exit status (0 ok, 1 error, 2 usage)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed usage or help
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    from .errors import AlkstoreError

    try:
        if args.func is cmd_dead_requeue:
            return args.func(args, out, err)
        return args.func(args, out)
    except KeyboardInterrupt:
        return 130 if args.command != "status" else 0
    except BrokenPipeError:
        return 0
    except (CLIError, AlkstoreError) as exc:
        err.write(f"{PROG}: error: {_error_line(exc)}\n")
        return EXIT_ERROR
    except Exception as exc:  # a database error mid-command: still one line, no traceback
        err.write(f"{PROG}: error: {type(exc).__name__}: {_error_line(exc)}\n")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
