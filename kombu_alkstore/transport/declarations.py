"""The queues a connection declared, and their bindings, to declare again if dropped.

A queue with ``x-expires`` (Celery's pidbox, reply and event queues, kombu's Broadcast
queues) is dropped once unused for its expiry; a live worker refreshes its queues every
sweep. A process frozen for longer (SIGSTOP, a paused VM, a debugger) finds them gone when
it runs again, and would stay deaf to ``inspect``/``control`` and broadcasts until
restarted. Its next sweep notices (the refresh touched fewer queues than it consumes) and
declares them again, bindings included, from what this record kept. Messages sent to a
queue while it was gone are lost, as on RabbitMQ.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from ..compat import kombu as compat_kombu

logger = logging.getLogger("kombu_alkstore")
# A declaration kombu retries after a reconnect goes to the new channel (compat.kombu).
compat_kombu.install()


@dataclass
class _Queue:
    message_ttl: float | None = None
    expires: float | None = None
    bindings: set[tuple[str, str]] = field(default_factory=set)


class Declarations:
    """What this connection declared (safe to read from the housekeeping thread)."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}
        self._lock = threading.Lock()

    def declared(self, queue: str, message_ttl: float | None, expires: float | None) -> None:
        with self._lock:
            q = self._queues.setdefault(queue, _Queue())
            q.message_ttl, q.expires = message_ttl, expires

    def bound(self, queue: str, exchange: str, routing_key: str) -> None:
        with self._lock:
            self._queues.setdefault(queue, _Queue()).bindings.add((exchange, routing_key))

    def unbound(self, queue: str, exchange: str, routing_key: str) -> None:
        with self._lock:
            if queue in self._queues:
                self._queues[queue].bindings.discard((exchange, routing_key))

    def deleted(self, queue: str) -> None:
        with self._lock:
            self._queues.pop(queue, None)

    def declare_again(self, store: Any, gone: list[str]) -> list[str]:
        """Declare the queues of ``gone`` this connection declared (with their bindings);
        returns those it declared again."""
        with self._lock:
            known = {name: self._queues[name] for name in gone if name in self._queues}
        for name, q in known.items():
            store.queue_declare(name, message_ttl=q.message_ttl, expires=q.expires)
            for exchange, routing_key in sorted(q.bindings):
                store.bind(exchange, routing_key, name)
        if known:
            logger.warning(
                "alkstore: queue(s) %s were dropped as unused while this process did not "
                "run (longer than their expiry: frozen, or paused): declared again; "
                "messages sent to them meanwhile are lost",
                ", ".join(sorted(known)),
            )
        return sorted(known)
