"""A job's message as the dashboard's pages show it."""

from __future__ import annotations

import json
from typing import Any

from ..present import decode
from ..store import Job

#: Characters of a message's arguments a list shows at most (then ``…``).
PREVIEW_WIDTH = 120


def describe(job: Job) -> dict[str, Any]:
    """A job's message decoded for display (see :func:`kombu_alkstore.present.decode`:
    JSON bodies only): ``task``, ``task_id`` (the message id when the body names none),
    a one-line ``preview`` of its arguments, ``eta``, the ``decoded`` message, and its
    parts indented as JSON under ``pretty``."""
    d = decode(job.body)
    args = d.get("args")
    kwargs = d.get("kwargs")
    preview = ""
    if "args" in d:
        parts = [json.dumps(a, default=str) for a in (args or [])]
        parts += [f"{k}={json.dumps(v, default=str)}" for k, v in (kwargs or {}).items()]
        preview = ", ".join(parts)
    elif "payload" in d:
        preview = json.dumps(d["payload"], default=str)
    elif "body_note" in d:
        preview = d["body_note"]
    if len(preview) > PREVIEW_WIDTH:
        preview = preview[: PREVIEW_WIDTH - 1] + "…"
    return {
        "job": job,
        "task": d.get("task") or "",
        "task_id": d.get("task_id") or job.msg_id or "",
        "preview": preview,
        "eta": d.get("headers", {}).get("eta"),
        "decoded": d,
        "pretty": {
            k: json.dumps(d[k], indent=2, default=str, ensure_ascii=False)
            for k in ("args", "kwargs", "headers", "properties", "payload")
            if k in d
        },
    }
