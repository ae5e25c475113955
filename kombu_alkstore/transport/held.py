"""Claims a connection holds: their delivery tags, and handing them back unprocessed."""

from __future__ import annotations

import logging
from typing import Any

from ..store import Delivery

logger = logging.getLogger("kombu_alkstore")


def tag_of(delivery: Delivery) -> str:
    """The kombu delivery tag of a claim: its job id and claim token."""
    return f"{delivery.id}:{delivery.token}"


def after_lapse(delivery: Delivery) -> str:
    """What becomes of a job whose claim lapsed, for the log: claimed again, or, its
    attempts spent, dead-lettered by the next claim or sweep."""
    if delivery.attempts >= delivery.max_attempts:
        return (
            f"its attempts are spent ({delivery.attempts}/{delivery.max_attempts}): "
            "it goes to the dead letters"
        )
    return "it will be delivered again"


def hand_back(store: Any, deliveries: list[Delivery]) -> None:
    """Return claimed, undelivered jobs to pending with their attempt refunded. Through a
    lost connection this only logs: the claims lapse by themselves after the timeout."""
    if not deliveries or store is None:
        return
    try:
        store.release(deliveries)
    except store.connection_errors as exc:
        logger.warning("alkstore: could not hand back %d messages: %r", len(deliveries), exc)
