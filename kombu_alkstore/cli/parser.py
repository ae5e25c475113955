"""The command line's grammar: every command's parser, in the order ``--help`` lists them."""

from __future__ import annotations

import argparse
import os

from . import acts, admin, dashboard, dead, scheduled, status
from .arguments import add_connection_options
from .errors import PROG


def build_parser() -> argparse.ArgumentParser:
    """The ``kombu-alkstore`` parser; each command's namespace has ``func(args, out, err)``
    returning the exit status, and the connection options before or after the command."""
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
    for commands in (status, scheduled, dead, admin, acts, dashboard):
        commands.add_parsers(sub, common)
    return parser
