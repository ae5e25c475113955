"""The question a destructive command asks before it runs, as ``celery purge`` asks it.

``celery purge`` (click's ``confirm``) asks whether or not stdin is a terminal: it reads
the answer from stdin, so ``yes | celery purge`` proceeds and a run without input (stdin
at its end, ``< /dev/null``, a cron job) aborts with status 1 and nothing deleted;
``-f/--force`` skips the question. These commands do the same, writing the question on
stderr so stdout keeps only the command's result.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .errors import CLIError

#: The answers that mean yes (any case); anything else, or no answer, is no.
YES = frozenset({"y", "yes"})


def ask(question: str, stdin: TextIO | None, err: TextIO) -> bool:
    """Write ``question`` and `` [y/N]: `` on ``err``, read one line from ``stdin``
    (default ``sys.stdin``): True for y/yes; False for anything else, an empty line, the
    end of input, or a stdin that cannot be read."""
    err.write(f"{question} [y/N]: ")
    err.flush()
    try:
        line = (stdin or sys.stdin).readline()
    except (OSError, ValueError):  # closed, or not readable (a captured test's stdin)
        line = ""
    if not line:
        err.write("\n")
    return line.strip().lower() in YES


def confirm_purge(count: int, queue: str | None, stdin: TextIO | None, err: TextIO) -> None:
    """Ask before deleting ``count`` dead letters (of ``queue``, or all), in the words
    ``celery purge`` uses; CLIError ``aborted: nothing purged …`` unless the answer is
    yes."""
    what = f"{count} dead letter{'s' if count != 1 else ''}"
    where = f" of queue {queue!r}" if queue is not None else " (every queue)"
    question = (
        f"WARNING: This will remove {what}{where} for good.\n"
        "         There is no undo for this operation!\n\n"
        "(to skip this prompt use the -f option)\n"
        "Are you sure you want to delete them?"
    )
    if not ask(question, stdin, err):
        raise CLIError(
            "aborted: nothing purged (answer y, or pass -f/--force to skip the question)"
        )
