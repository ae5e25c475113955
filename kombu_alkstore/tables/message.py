"""A claimed row as a Celery task message (protocol 2), carried by a :class:`RowDelivery`.

The envelope is the one kombu's virtual transport stores for a publish, so the channel
delivers a row exactly as it delivers a job (``transport.envelope.to_message``).
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from kombu.utils.json import dumps

from ..store import Delivery
from .spec import TableSpec

#: Task ids of rows are uuid5 of the queue and the row id in this namespace: the same
#: row keeps its task id across attempts, as a Celery retry keeps its own.
TASK_ID_NAMESPACE = uuid.UUID("6f3c1a52-9b0e-4d3a-8c41-2b6e0d7f9a10")

#: The Celery protocol headers a ``headers`` column may not override.
PROTOCOL_HEADERS = frozenset({"lang", "task", "id", "root_id", "parent_id", "retries"})


@dataclass(frozen=True, slots=True)
class RowDelivery(Delivery):
    """A claimed row of a table queue (a :class:`Delivery`, so the channel, heartbeats
    and acks handle it as any claim): ``row_id`` is the id as the driver read it,
    ``fence`` the attempt count the claim wrote (None without an attempt column)."""

    row_id: Any = None
    fence: int | None = None


class RowError(ValueError):
    """A row that cannot become a task message (its payload or headers undecodable)."""


def _json(value: Any, what: str) -> Any:
    """A JSON column's value: decoded already (jsonb), or text/bytes to decode."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise RowError(f"{what} is not JSON: {exc}") from None
    return value


def call_of(spec: TableSpec, row: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The task's ``(args, kwargs)`` for a row. Payload mode: a JSON object is the
    keyword arguments, an array the positional ones, anything else the one argument.
    Row mode: every column of the row, by name, as keyword arguments."""
    if spec.mode == "row":
        return [], dict(row)
    payload = _json(row.get(spec.columns["payload"]), "the payload column")
    if isinstance(payload, dict):
        return [], payload
    if isinstance(payload, list):
        return payload, {}
    return [payload], {}


def task_id_of(spec: TableSpec, row_id: Any) -> str:
    """The task id of a row (stable across its attempts)."""
    return str(uuid.uuid5(TASK_ID_NAMESPACE, f"{spec.queue}\x00{row_id}"))


def envelope(spec: TableSpec, row: dict[str, Any], attempt: int) -> bytes:
    """The kombu envelope (JSON bytes) of a Celery task message for ``row``.

    Raises :class:`RowError` when the payload or headers column cannot be decoded."""
    row_id = row[spec.columns["id"]]
    args, kwargs = call_of(spec, row)
    task_id = task_id_of(spec, row_id)
    extra = (
        _json(row.get(spec.columns["headers"]), "the headers column")
        if spec.has("headers")
        else None
    )
    if extra is not None and not isinstance(extra, dict):
        raise RowError(f"the headers column holds {type(extra).__name__}, not a JSON object")
    headers = {k: v for k, v in (extra or {}).items() if k not in PROTOCOL_HEADERS}
    headers.update(
        lang="py",
        task=spec.task,
        id=task_id,
        root_id=task_id,
        parent_id=None,
        group=None,
        retries=max(attempt - 1, 0),
        eta=None,
        expires=None,
        argsrepr=repr(args),
        kwargsrepr=repr(kwargs),
        origin=f"alkstore-table:{spec.table}",
        alkstore_row=str(row_id),
    )
    body = dumps(
        [args, kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    )
    message = {
        "body": base64.b64encode(body.encode("utf-8")).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": spec.queue},
            "priority": 0,
            "body_encoding": "base64",
        },
    }
    return dumps(message).encode("utf-8")
