"""Options and argument types more than one command takes."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping


def add_connection_options(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] | None
) -> None:
    """``-b/--broker``, ``--schema`` and ``--tables``; with ``environ=None`` they default to
    nothing, so a subcommand's copy never overrides a value given before the command."""
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
    parser.add_argument(
        "--tables",
        default=argparse.SUPPRESS if suppress else environ.get("ALKSTORE_TABLES"),
        metavar="FILE",
        help="a JSON file holding the transport option `tables`: table queues shown with "
        "the others (default: $ALKSTORE_TABLES)",
    )


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def positive(text: str) -> float:
    """An argparse type: a finite number above 0 (ArgumentTypeError otherwise)."""
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def non_negative(text: str) -> float:
    """An argparse type: a finite number of 0 or more (ArgumentTypeError otherwise)."""
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value
