"""The one kind of error the CLI reports as a line on stderr (exit status 1)."""

from __future__ import annotations

PROG = "kombu-alkstore"
EXIT_ERROR = 1
EXIT_USAGE = 2


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


def error_line(exc: BaseException) -> str:
    """``exc`` as one line (its message with whitespace runs made one space; its type's
    name when it has no message)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
