"""``dead list|show|requeue|purge``: the dead letters, by id, Celery task id, queue or all."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from ..present import decode, fmt_time, job_dict, one_line
from ..store import Job, Store
from ..store.admin import DeadFilter
from .acts import actor_of, add_actor_options
from .confirm import confirm_purge
from .connection import open_cli_store
from .errors import CLIError
from .listing import Column, add_listing_options, list_jobs, task_cell, task_id_cell
from .output import Progress

#: Dead letters moved per statement by ``dead requeue --queue/--all``.
REQUEUE_BATCH = 1000


def cmd_dead_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """One line per dead letter, newest first."""
    columns: list[Column] = [
        ("ID", lambda j, d: str(j.id)),
        ("TASK ID", task_id_cell),
        ("TASK", task_cell),
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


def find_job(store: Store, ident: str) -> Job:
    """A job by its own id (digits) or by the Celery task id; CLIError when unknown."""
    job = None
    if ident.isdigit():
        job = store.get_job(int(ident))
    if job is None:
        job = store.get_job(ident)
    if job is None:
        raise CLIError(f"no dead letter or message with id or task id {ident!r}")
    return job


def cmd_dead_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """One message (dead or not) with its Celery body decoded, as text or ``--json``."""
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


def resolve_dead_ids(store: Store, idents: list[str]) -> list[int]:
    """The dead letters' ids for ids or Celery task ids, each once, in the order given;
    CLIError for an unknown one or one that is not dead."""
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
    """Move the chosen dead letters back to their queues (attempts reset), in batches of
    ``--batch`` with progress on ``err``; dead letters that die meanwhile stay dead.
    Each batch is kept as an act per queue (``--by``, ``--reason``; see :mod:`.acts`)."""
    how = _selection(args)
    if args.batch < 1:
        raise CLIError(f"--batch must be at least 1, got {args.batch}")
    actor = actor_of(args)
    store = open_cli_store(args)
    try:
        if how == "ids":
            ids = resolve_dead_ids(store, args.ids)
            moved = store.dead_requeue(ids=ids, actor=actor)
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
            moved += store.dead_requeue(ids=ids[start : start + args.batch], actor=actor)
            progress.update(min(start + args.batch, total))
        progress.done()
        out.write(f"requeued {moved} dead letter{'s' if moved != 1 else ''}{where}\n")
        return 0
    finally:
        store.close()


def cmd_dead_purge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Delete the chosen dead letters for good. ``--queue``/``--all`` ask first, as
    ``celery purge`` does, unless ``-f/--force`` (see :func:`.confirm.confirm_purge`);
    ids do not. Kept as an act per queue (``--by``, ``--reason``; see :mod:`.acts`)."""
    how = _selection(args)
    actor = actor_of(args)
    store = open_cli_store(args)
    try:
        if how == "ids":
            gone = store.dead_purge(ids=resolve_dead_ids(store, args.ids), actor=actor)
        else:
            if not args.force:
                n = store.dead_count(DeadFilter(queue=args.queue))
                if not n:
                    where = f" of queue {args.queue!r}" if args.queue is not None else ""
                    out.write(f"no dead letters{where} to purge\n")
                    return 0
                confirm_purge(n, args.queue, getattr(args, "stdin", None), err)
            gone = store.dead_purge(queue=args.queue, actor=actor)
    finally:
        store.close()
    where = f" of queue {args.queue!r}" if args.queue is not None else ""
    out.write(f"purged {gone} dead letter{'s' if gone != 1 else ''}{where}\n")
    return 0


def dead_ids(store: Store, queue: str | None, page: int = 10_000) -> list[int]:
    """Ids of the dead letters (of ``queue``) as they are now, ascending.

    Read once up front, so a message that dies again while the batches run is not
    requeued a second time by the same command.
    """
    where, ids = DeadFilter(queue=queue), []
    while True:
        batch = store.dead_ids(where, after=ids[-1] if ids else 0, limit=page)
        ids += batch
        if len(batch) < page:
            return ids


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dead`` and its actions on the subcommands ``sub``."""
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
        add_actor_options(p)
        if name == "purge":
            p.add_argument(
                "-f",
                "--force",
                action="store_true",
                help="do not ask before purging --queue/--all (as celery purge -f)",
            )
        if name == "requeue":
            p.add_argument("--batch", type=int, default=REQUEUE_BATCH, help=argparse.SUPPRESS)
            p.set_defaults(func=cmd_dead_requeue)
        else:
            p.set_defaults(func=cmd_dead_purge)
