"""``setup``, ``sweep``, ``queue pause|resume``: the store's tables and state, not its
messages."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..store import Store
from ..store.options import validate_name
from . import limits
from .acts import actor_of, add_actor_options
from .connection import open_cli_store, parse, store_url
from .errors import PROG, CLIError


def cmd_setup(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Create the tables (idempotent); with ``--print``, write the DDL instead (with the
    GRANTs ``--grant ROLE`` needs) and touch no database."""
    if args.print:
        from ..store.setup_script import setup_script

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


def cmd_sweep(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one maintenance sweep now and say what it did."""
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


def cmd_queue(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``queue pause|resume NAME``: claims (and hand-offs) skip a paused queue; publishes
    still land; the state is kept in the store until resumed. Pausing a queue the store
    does not know (not declared, no messages, no dead letters) still pauses it, ahead of
    its first use, with a one-line warning on ``err`` naming the queues that hold
    messages. A pause or resume that changes the queue is kept as an act (``--by``,
    ``--reason``; see :mod:`.acts`)."""
    actor = actor_of(args)
    store = open_cli_store(args)
    try:
        if args.queue_command == "pause":
            warning = unknown_queue_warning(store, args.name)
            changed = store.pause_queue(args.name, actor=actor)
            if warning:
                err.write(f"{PROG}: warning: {warning}\n")
            out.write(f"queue {args.name!r} {'paused' if changed else 'was paused already'}\n")
        else:
            changed = store.resume_queue(args.name, actor=actor)
            out.write(f"queue {args.name!r} {'resumed' if changed else 'was not paused'}\n")
    finally:
        store.close()
    return 0


#: Queue names an unknown-queue warning lists at most.
LISTED_QUEUES = 10


def unknown_queue_warning(store: Store, name: str) -> str | None:
    """None when ``name`` is a queue the store knows (declared by a worker or publisher,
    holding messages or dead letters, or paused); else the one-line warning, naming the
    queues that hold messages (at most :data:`LISTED_QUEUES`) and how to list them."""
    validate_name(name, "queue name")
    if store.knows_queue(name):
        return None
    names = [c.queue for c in store.counts()]
    listed = ", ".join(names[:LISTED_QUEUES]) + (", …" if len(names) > LISTED_QUEUES else "")
    known = f"queues with messages: {listed}" if names else "no queue holds messages"
    return (
        f"no queue {name!r} is declared or holds messages (a typo?); paused anyway, "
        f"ahead of its first use; {known} (kombu-alkstore status lists them)"
    )


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``setup``, ``sweep`` and ``queue`` on the subcommands ``sub``."""
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

    queue = sub.add_parser("queue", help="pause or resume a queue, or limit its claims")
    qsub = queue.add_subparsers(dest="queue_command", metavar="ACTION")
    qsub.required = True
    for name, helptext in (
        ("pause", "claims and hand-offs skip the queue; publishes still land"),
        ("resume", "claims of the queue start again"),
    ):
        p = qsub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("name", metavar="NAME", help="the queue")
        add_actor_options(p)
        p.set_defaults(func=cmd_queue)
    limits.add_parser(qsub, common)
