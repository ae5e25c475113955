"""Claims read late: checked, extended or dropped before they are delivered.

A claim read late (the event loop ran a task inline, solo, gevent or eventlet, while the
claim's answer or its hand-off waited unread) may have lapsed, and its job may already
run elsewhere. Every delivery, claimed or handed off, passes :func:`still_claimed` first.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Container

from ..store import Delivery
from .link import Link

logger = logging.getLogger("kombu_alkstore")


def still_claimed(
    link: Link, deliveries: list[Delivery], skip: Container[str] = ()
) -> tuple[list[Delivery], set[str]]:
    """``deliveries`` without those whose claims lapsed before they could be delivered,
    and the queues of the lapsed ones (to claim from again). Those of the queues in
    ``skip`` (no-ack ones) are kept as they are.

    Those older than a third of their timeout (by this database's clock, as this host
    estimates it) are extended first, in one statement, and come back with their new
    deadline; the lapsed ones are dropped."""
    now = link.db_now()
    old = [
        d
        for d in deliveries
        if d.queue not in skip
        and d.visibility_timeout
        and d.deadline - now < d.visibility_timeout * 2 / 3
    ]
    if not old or link.store is None:
        return deliveries, set()
    alive = link.store.heartbeat(old)
    lost = {d.id for d in old if d.id not in alive}
    if lost:
        logger.warning(
            "alkstore: %d message(s) claimed for this worker lapsed before it could "
            "take them (its event loop was busy): not delivered, claimed again",
            len(lost),
        )
    extended = {d.id for d in old} - lost
    live = [
        dataclasses.replace(d, deadline=now + d.visibility_timeout) if d.id in extended else d
        for d in deliveries
        if d.id not in lost
    ]
    return live, {d.queue for d in old if d.id in lost}
