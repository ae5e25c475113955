"""How a kombu message (the virtual transport's dict) becomes a job row, and back."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime, timezone
from typing import Any

from kombu.utils.json import dumps, loads

from ..errors import ConfigurationError
from ..store import Delivery, NewJob
from ..store.unique import KEY_HEADER, STATES_HEADER, check_key, claimed_counts


def _epoch(value: Any, what: str) -> float | None:
    """Seconds since the epoch of a message time; a naive time is UTC, as Celery reads it
    (``celery.utils.time.maybe_make_aware``), never the publishing host's zone."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, datetime):
        try:
            value = datetime.fromisoformat(str(value))
        except ValueError:
            raise ConfigurationError(f"message {what} {value!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def to_job(queue: str, message: dict[str, Any]) -> NewJob:
    """The job for ``message`` on ``queue``.

    The task's ``eta`` becomes ``run_at`` (native delayed delivery); its ``expires`` and
    the AMQP ``expiration`` (ms) become ``expires_at``; ``priority`` is 0–255, higher first;
    the task id (``headers['id']``) is kept as the job's message id; the headers
    ``alkstore_unique`` and ``alkstore_unique_states`` give its unique key and the
    states that hold it (:mod:`kombu_alkstore.unique`), refused by name when malformed.
    """
    headers = message.get("headers") or {}
    props = message.get("properties") or {}
    priority = props.get("priority")
    # kombu's pidbox stamps broadcasts that want no reply with "expires": 0, meaning none
    # (a revoke among them): only a real time expires a message.
    expires = [_epoch(headers.get("expires") or None, "expires")]
    if props.get("expiration") not in (None, ""):
        try:
            expires.append(time.time() + float(props["expiration"]) / 1000.0)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"message expiration {props['expiration']!r} is not a number of ms"
            ) from None
    known = [e for e in expires if e is not None]
    msg_id = headers.get("id")  # the task id; replies carry it only as a correlation id
    unique_key = check_key(headers.get(KEY_HEADER), KEY_HEADER)
    unique_claimed = claimed_counts(headers.get(STATES_HEADER), STATES_HEADER)
    return NewJob(
        queue=queue,
        body=dumps(message).encode("utf-8"),
        priority=0 if priority is None else priority,
        run_at=_epoch(headers.get("eta"), "eta"),
        expires_at=min(known) if known else None,
        msg_id=str(msg_id) if msg_id is not None else None,
        unique_key=unique_key,
        unique_claimed=unique_claimed,
    )


#: A host clock this far from the database's (seconds) gets the task's ETA shifted.
SKEW_TOLERANCE = 0.5


def to_message(delivery: Delivery, clock_offset: float = 0.0) -> dict[str, Any]:
    """The kombu message dict for a claimed job, with a delivery tag unique to this claim.

    ``clock_offset`` is the database's clock minus this host's (``Store.clock_offset``).
    The broker held the job until its ``eta`` by the database's clock; Celery then holds
    it again until the ``eta`` by this host's (and expires it by ``expires`` on this
    host's). Beyond :data:`SKEW_TOLERANCE` both are moved into this host's clock, so a
    worker whose clock is skewed neither runs the task late nor expires it early.
    """
    message = loads(bytes(delivery.body))
    if not isinstance(message, dict) or not isinstance(message.get("properties"), dict):
        raise ValueError("not a kombu message envelope")
    headers = message.get("headers")
    if abs(clock_offset) > SKEW_TOLERANCE and isinstance(headers, dict):
        for key in ("eta", "expires"):
            with contextlib.suppress(ConfigurationError, TypeError, ValueError, OverflowError):
                when = _epoch(headers.get(key), key)
                if when is not None and not isinstance(headers[key], (int, float)):
                    shifted = datetime.fromtimestamp(when - clock_offset, tz=timezone.utc)
                    headers[key] = shifted.isoformat()
    props = message["properties"]
    props["delivery_tag"] = f"{delivery.id}:{delivery.token}"
    info = props.setdefault("delivery_info", {})
    info["redelivered"] = delivery.attempts > 1
    message["redelivered"] = delivery.attempts > 1
    return message
