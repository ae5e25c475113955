"""How a kombu message (the virtual transport's dict) becomes a job row, and back."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from kombu.utils.json import dumps, loads

from ..errors import ConfigurationError
from ..store import Delivery, NewJob


def _epoch(value: Any, what: str) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        raise ConfigurationError(f"message {what} {value!r} is not an ISO 8601 time") from None


def to_job(queue: str, message: dict[str, Any]) -> NewJob:
    """The job for ``message`` on ``queue``.

    The task's ``eta`` becomes ``run_at`` (native delayed delivery); its ``expires`` and
    the AMQP ``expiration`` (ms) become ``expires_at``; ``priority`` is 0–255, higher first;
    the task id (``headers['id']``) is kept as the job's message id.
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
    return NewJob(
        queue=queue,
        body=dumps(message).encode("utf-8"),
        priority=0 if priority is None else priority,
        run_at=_epoch(headers.get("eta"), "eta"),
        expires_at=min(known) if known else None,
        msg_id=str(msg_id) if msg_id is not None else None,
    )


def to_message(delivery: Delivery) -> dict[str, Any]:
    """The kombu message dict for a claimed job, with a delivery tag unique to this claim."""
    message = loads(bytes(delivery.body))
    if not isinstance(message, dict) or not isinstance(message.get("properties"), dict):
        raise ValueError("not a kombu message envelope")
    props = message["properties"]
    props["delivery_tag"] = f"{delivery.id}:{delivery.token}"
    info = props.setdefault("delivery_info", {})
    info["redelivered"] = delivery.attempts > 1
    message["redelivered"] = delivery.attempts > 1
    return message
