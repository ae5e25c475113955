"""Run one command line: parse it, run the command, turn every error into one line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from ..errors import AlkstoreError
from .errors import EXIT_ERROR, EXIT_USAGE, PROG, CLIError, error_line
from .parser import build_parser


def main(
    argv: Sequence[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run the CLI; return the exit status (0 ok, 1 error, 2 usage). A command that asks
    a question (``dead purge --all``) reads the answer from ``stdin`` (default
    ``sys.stdin``).

    Every error a user can cause is one line on ``err`` and status 1, never a traceback;
    Ctrl-C ends ``status --watch`` with 0 and any other command with 130; a closed pipe
    on ``out`` is 0.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed usage or help
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    args.stdin = stdin
    try:
        return args.func(args, out, err)
    except KeyboardInterrupt:
        return 130 if args.command != "status" else 0
    except BrokenPipeError:
        return 0
    except (CLIError, AlkstoreError) as exc:
        err.write(f"{PROG}: error: {error_line(exc)}\n")
        return EXIT_ERROR
    except Exception as exc:  # a database error mid-command: still one line, no traceback
        err.write(f"{PROG}: error: {type(exc).__name__}: {error_line(exc)}\n")
        return EXIT_ERROR
