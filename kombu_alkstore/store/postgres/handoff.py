"""The hand-off wire format: a job a publisher claimed for an idle consumer.

The publisher's ``insert`` statement (``queries.sql``, fragment ``handoff_object``)
builds it and sends it with NOTIFY on the waiter's own channel (the prefix
``handoff_prefix`` and its backend pid): a tag and one JSON object::

    ["h", {"chan": 1, "id": 42, "token": 8123…, "queue": "celery", "priority": 0,
           "attempts": 1, "max_attempts": 5, "backoff_base": 1.0, "deadline": 1712…,
           "msg_id": "…", "body": "<base64>", "visibility_timeout": 30.0}]

``chan`` is the channel the offer was made for; the other keys are the
:class:`~..values.Delivery` fields, the body in base64. The publisher hands a job off only
when its queue, message id and base64 body fit in :data:`MAX_BYTES` of JSON
(:func:`fits`, bound to the insert as ``fits``), so the whole notification stays below
NOTIFY's 8000-byte payload limit. :func:`decode` is the one reader of this format.

During a rolling upgrade both sides may meet the earlier, positional format
(``["h", chan, id, token, queue, priority, max_attempts, backoff_base, deadline, msg_id,
body, visibility_timeout]``, before issue 15): :func:`decode` reads it too, and a worker
of that version reading the new one fails to unpack it and only wakes (its claim lapses
and the job is delivered again), so neither side stops on the other's hand-offs.
"""

from __future__ import annotations

import base64
import binascii
import json

from ..values import Delivery

#: The most bytes a handed-off job's queue, message id and base64 body may take as the
#: JSON text ``[queue, msg_id, body]`` that PostgreSQL writes (escapes and the base64's
#: line breaks counted): with the other fields and their names (under 400 bytes) the
#: object stays below NOTIFY's 8000-byte limit.
MAX_BYTES = 7600
#: PostgreSQL's ``encode(…, 'base64')`` breaks its lines after this many characters.
_BASE64_LINE = 76

#: Errors :func:`decode` raises for a payload that is not a hand-off object.
DECODE_ERRORS = (ValueError, TypeError, KeyError, binascii.Error)


def fits(queue: str, msg_id: str | None, body: bytes) -> bool:
    """Whether a job may be handed off: the length of PostgreSQL's
    ``json_build_array(queue, msg_id, encode(body, 'base64'))::text`` in UTF-8 (counted
    here, not built: the body is never encoded) is at most :data:`MAX_BYTES`."""
    if len(body) > MAX_BYTES:  # its base64 alone is longer
        return False
    encoded = 4 * -(-len(body) // 3)
    breaks = (encoded - 1) // _BASE64_LINE if encoded else 0
    # The same escapes as PostgreSQL's JSON: quote, backslash, control characters.
    rest = len(json.dumps([queue, msg_id, ""], ensure_ascii=False).encode("utf-8"))
    return rest + encoded + 2 * breaks <= MAX_BYTES  # a break is written "\n"


def decode(payload: str) -> tuple[int, Delivery]:
    """``(channel number, delivery)`` from a hand-off notification's payload; raises one
    of :data:`DECODE_ERRORS` for anything else."""
    tagged = json.loads(payload)
    if not isinstance(tagged, list) or not tagged or tagged[0] != "h":
        raise TypeError(f"a hand-off is a list tagged 'h', got {payload[:40]!r}")
    if len(tagged) == 2 and isinstance(tagged[1], dict):
        fields = dict(tagged[1])
    elif len(tagged) in (11, 12):
        fields = dict(zip(_POSITIONAL, tagged[1:], strict=False))
        fields["attempts"] = 1  # a hand-off is the job's first claim
    else:
        raise ValueError(f"a hand-off has a tag and an object, got {len(tagged)} items")
    chan = int(fields.pop("chan"))
    fields["body"] = base64.b64decode(fields["body"])
    return chan, Delivery(**fields)


#: The earlier positional format's fields, after its tag (see the module docstring).
_POSITIONAL = (
    "chan",
    "id",
    "token",
    "queue",
    "priority",
    "max_attempts",
    "backoff_base",
    "deadline",
    "msg_id",
    "body",
    "visibility_timeout",
)
