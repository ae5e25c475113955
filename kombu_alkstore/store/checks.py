"""The engine-neutral checks of a call's arguments: each refuses a bad value with a
:class:`ConfigurationError` naming it, before any statement runs."""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigurationError
from .options import validate_name


def is_number(value: Any) -> bool:
    """A real, finite number (NaN and infinities are refused, as bools are)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_queue_args(name: str, message_ttl: float | None, expires: float | None) -> None:
    """Validate a queue declaration; raise :class:`ConfigurationError` naming the bad value."""
    validate_name(name, "queue name")
    for what, value in (("message_ttl", message_ttl), ("expires", expires)):
        if value is not None and (not is_number(value) or not value > 0):
            raise ConfigurationError(
                f"queue {name!r}: {what} must be a positive number of seconds, got {value!r}"
            )


def check_lease_ttl(ttl: Any) -> None:
    """Accept a lease time to live: a positive number of seconds."""
    if not is_number(ttl) or not ttl > 0:
        raise ConfigurationError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
