"""The hand-off wire format: a job a publisher claimed for an idle consumer.

The publisher's ``insert`` statement (``queries.sql``, fragment ``handoff_object``)
builds it and sends it with NOTIFY on the waiter's own channel (the prefix
``handoff_prefix`` and its backend pid): a tag and one JSON object::

    ["h", {"chan": 1, "id": 42, "token": 8123…, "queue": "celery", "priority": 0,
           "attempts": 1, "max_attempts": 5, "backoff_base": 1.0, "deadline": 1712…,
           "msg_id": "…", "body": "<base64>", "visibility_timeout": 30.0}]

``chan`` is the channel the offer was made for; the other keys are the
:class:`~..values.Delivery` fields, the body in base64. The publisher hands a job off only
when its queue, message id and base64 body fit in ``handoff_max_bytes`` (7600 bytes of
JSON), so the whole notification stays below NOTIFY's 8000-byte payload limit.
:func:`decode` is the one reader of this format.

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

#: Errors :func:`decode` raises for a payload that is not a hand-off object.
DECODE_ERRORS = (ValueError, TypeError, KeyError, binascii.Error)


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
