"""The hand-off wire format: a job a publisher claimed for an idle consumer.

The publisher's ``insert`` statement (``queries.sql``, fragment ``handoff_object``)
builds one JSON object and sends it with NOTIFY on the waiter's own channel (the prefix
``handoff_prefix`` and its backend pid)::

    {"chan": 1, "id": 42, "token": 8123…, "queue": "celery", "priority": 0,
     "attempts": 1, "max_attempts": 5, "backoff_base": 1.0, "deadline": 1712…,
     "msg_id": "…", "body": "<base64>", "visibility_timeout": 30.0}

``chan`` is the channel the offer was made for; the other keys are the
:class:`~..base.Delivery` fields, the body in base64. The publisher hands a job off only
when its queue, message id and base64 body fit in ``handoff_max_bytes`` (7600 bytes of
JSON), so the whole object stays below NOTIFY's 8000-byte payload limit. :func:`decode`
is the one reader of this format.
"""

from __future__ import annotations

import base64
import binascii
import json

from ..base import Delivery

#: Errors :func:`decode` raises for a payload that is not a hand-off object.
DECODE_ERRORS = (ValueError, TypeError, KeyError, binascii.Error)


def decode(payload: str) -> tuple[int, Delivery]:
    """``(channel number, delivery)`` from a hand-off notification's payload; raises one
    of :data:`DECODE_ERRORS` for anything else."""
    fields = json.loads(payload)
    if not isinstance(fields, dict):
        raise TypeError(f"a hand-off is a JSON object, got {type(fields).__name__}")
    chan = int(fields.pop("chan"))
    fields["body"] = base64.b64decode(fields["body"])
    return chan, Delivery(**fields)
