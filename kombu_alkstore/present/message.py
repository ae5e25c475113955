"""A stored message decoded for a person to read: what the CLI prints and the dashboard
shows (task name, id, arguments, headers), without running any deserializer but JSON."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from typing import Any

from ..store import Job


def decode(body: bytes) -> dict[str, Any]:
    """What a stored message says: task name, id, args, kwargs, headers (Celery protocol 1/2).

    Only JSON bodies are decoded; other serializers (pickle, yaml, msgpack) are reported by
    content type and size and never deserialized here. Never raises on a bad body: what
    cannot be read is described under ``error`` (or ``body_note``); ``task``, ``task_id``,
    ``headers`` and ``properties`` are always present.
    """
    out: dict[str, Any] = {"task": None, "task_id": None, "headers": {}, "properties": {}}
    try:
        envelope = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError) as exc:
        out["error"] = f"not a kombu message envelope: {exc}"
        return out
    if not isinstance(envelope, dict):
        out["error"] = "not a kombu message envelope"
        return out
    headers = envelope.get("headers") or {}
    props = envelope.get("properties") or {}
    out["headers"], out["properties"] = headers, props
    out["content_type"] = envelope.get("content-type")
    out["task"] = headers.get("task")
    out["task_id"] = headers.get("id") or props.get("correlation_id")
    raw = envelope.get("body")
    try:
        if props.get("body_encoding") == "base64" and isinstance(raw, str):
            raw = base64.b64decode(raw)
        if isinstance(raw, str):
            raw = raw.encode(envelope.get("content-encoding") or "utf-8")
    except (ValueError, TypeError) as exc:
        out["error"] = f"body is not valid base64: {exc}"
        return out
    out["body_size"] = len(raw or b"")
    if out["content_type"] != "application/json":
        out["body_note"] = f"{out['body_size']} bytes of {out['content_type']}, not decoded"
        return out
    try:
        payload = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        out["error"] = f"body is not valid JSON: {exc}"
        return out
    if isinstance(payload, list) and len(payload) == 3 and isinstance(payload[1], dict):
        out["args"], out["kwargs"], out["embed"] = payload  # Celery protocol 2
    elif isinstance(payload, dict) and "task" in payload:  # Celery protocol 1
        out["task"] = out["task"] or payload.get("task")
        out["task_id"] = out["task_id"] or payload.get("id")
        out["args"], out["kwargs"] = payload.get("args"), payload.get("kwargs")
    else:
        out["payload"] = payload
    return out


def job_dict(job: Job, decoded: dict[str, Any] | None = None) -> dict[str, Any]:
    """A job's fields as JSON-ready values, its body replaced by the ``task`` name and the
    ``task_id`` (the message id when the body names none); ``decoded`` is
    :func:`decode` of its body when the caller has it already."""
    d = asdict(job)
    d.pop("body")
    decoded = decoded if decoded is not None else decode(job.body)
    d["task"] = decoded.get("task")
    d["task_id"] = decoded.get("task_id") or job.msg_id
    return d
