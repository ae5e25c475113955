"""Native chords: a counter per chord in the store, no ``celery.chord_unlock``.

Each header task's return (Celery's ``on_chord_part_return``) runs one transaction: the
chord's row is locked, the part recorded once per (header index, task id), the count
raised; the one transaction whose part completes the chord marks it fired and, in the
same block, joins the parts and publishes the callback. When the broker is an alkstore
on the same database and schema (``ResultConfig.shares_broker``) that publish goes through
the transaction's connection: the part, the count, the fired mark and the callback's
message commit together or not at all, so a worker killed anywhere in between leaves
the chord as it was (the header task, with ``acks_late``, is delivered again and
completes it). On another broker the callback is published right after the commit; a
worker killed in that window loses the callback (logged as a known gap in
docs/results.md).

Errors follow Celery's Redis backend: a failed header task fails the callback with
``ChordError("Dependency <id> raised …")`` (its ``link_error`` errbacks called); an error
joining the header or publishing the callback fails it with ``ChordError("Join error" /
"Callback error: …")``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import states
from celery.canvas import maybe_signature
from celery.exceptions import ChordError
from celery.result import GroupResult, allow_join_result

from ..store.resultstore import NO_INDEX

logger = logging.getLogger(__name__)


def _chord_error(message: str, cause: BaseException | None = None) -> ChordError:
    error = ChordError(message)
    error.__cause__ = cause
    return error


def expires_at(backend: Any) -> float | None:
    """When a chord's row and parts expire (``result_chord_expires``, else
    ``result_expires``; None: never)."""
    seconds = backend.chord_seconds()
    return time.time() + float(seconds) if seconds else None


def _unpack(backend: Any, part: bytes) -> Any:
    _, task_id, state, value = backend.decode(part)
    if state in states.EXCEPTION_STATES:
        value = backend.exception_to_python(value)
    if state in states.PROPAGATE_STATES:
        raise _chord_error(
            f"Dependency {task_id} raised {value!r}",
            value if isinstance(value, BaseException) else None,
        )
    return value


def _join(backend: Any, group_id: str, parts: list[bytes]) -> list[Any]:
    """The header's results for the callback (a nested header was saved by
    ``apply_chord`` and is joined as Celery's Redis backend does)."""
    app = backend.app
    header = GroupResult.restore(group_id, app=app, backend=backend)
    if header is not None:
        header.on_ready()
        with allow_join_result():
            return header.join_native(timeout=app.conf.result_chord_join_timeout, propagate=True)
    return [_unpack(backend, part) for part in parts]


def on_chord_part_return(backend: Any, request: Any, state: str, result: Any) -> Any:
    """Count one header task's return; publish the callback when it was the last."""
    task_id, group_id = request.id, request.group
    if not group_id or not task_id:
        return None
    app = backend.app
    index = NO_INDEX if request.group_index is None else int(request.group_index)
    value = backend._bytes(
        backend.encode([1, task_id, state, backend.encode_result(result, state)])
    )
    callback = maybe_signature(request.chord, app=app)
    bind = backend.config.shares_broker
    ready: list[Any] | None = None
    publishing = False
    try:
        with backend.tables.chord_part(
            group_id, task_id, index, value, bind, expires_at(backend)
        ) as parts:
            if parts is None:
                return None
            try:
                joined = _join(backend, group_id, parts)
            except ChordError as exc:
                logger.error("Chord %r raised: %r", group_id, exc)
                # In the transaction: the chord is fired with its error, once.
                return backend.chord_error_from_stack(callback, exc)
            except Exception as exc:  # noqa: BLE001 - Celery's contract: fail the callback
                logger.exception("Chord %r raised: %r", group_id, exc)
                return backend.chord_error_from_stack(
                    callback, _chord_error(f"Join error: {exc!r}", exc)
                )
            if bind:
                publishing = True
                callback.delay(joined)  # a row written through this transaction
            else:
                ready = joined
    except Exception as exc:
        if not publishing:
            raise  # the database failed: nothing was counted (Celery logs it)
        # The publish failed, so the transaction rolled back: the callback fails instead.
        logger.exception("Chord callback for %r raised: %r", group_id, exc)
        return backend.chord_error_from_stack(
            callback, _chord_error(f"Callback error: {exc!r}", exc)
        )
    if ready is None:
        return None
    try:
        retry = getattr(app.amqp, "_retry_publish", None)
        if retry is not None:
            retry(callback.delay, ready)
        else:
            callback.delay(ready)
    except Exception as exc:  # noqa: BLE001
        logger.exception("Chord callback for %r raised: %r", group_id, exc)
        return backend.chord_error_from_stack(
            callback, _chord_error(f"Callback error: {exc!r}", exc)
        )
    return None
