"""Which Celery workers hold which tasks (the consumers page), from Celery's remote
control, refreshed in the background."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any


class Inspector:
    """Which Celery workers hold which tasks, from Celery's remote control (``inspect
    active``/``reserved`` over this broker), refreshed in the background."""

    def __init__(self, broker_url: str, schema: str, every: float = 10.0) -> None:
        self.broker_url, self.schema, self.every = broker_url, schema, every
        self.workers: list[dict[str, Any]] = []
        #: Every task name a worker that answered has registered (``inspect
        #: registered``); None before the first answer, when no worker answered, or when
        #: the last round failed: then nobody knows.
        self.registered: set[str] | None = None
        self.taken_at: float | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._app: Any = None

    def start(self) -> None:
        """Poll every ``every`` seconds in a daemon thread."""
        threading.Thread(target=self._run, name="alkstore-web-inspect", daemon=True).start()

    def stop(self) -> None:
        """Stop polling (and close the Celery app) after the current round."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.workers = self.poll()
                self.error = None
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self.registered = None
            self.taken_at = time.time()
            self._stop.wait(self.every)
        if self._app is not None:
            with contextlib.suppress(Exception):
                self._app.close()

    def poll(self) -> list[dict[str, Any]]:
        """One round: per worker (by host name), its active and reserved task counts, the
        count per queue, the age of its oldest active task, and its first 20 tasks; sets
        :attr:`registered` from the same round's ``inspect registered``."""
        from celery import Celery

        import kombu_alkstore  # noqa: F401 - the alkstore transport alias

        if self._app is None:
            self._app = Celery("alkstore-dashboard", broker=self.broker_url, set_as_current=False)
            self._app.conf.broker_transport_options = {"schema": self.schema}
        insp = self._app.control.inspect(timeout=1.0)
        active = insp.active() or {}
        reserved = insp.reserved() or {}
        self.registered = registered_names(insp.registered() or {})
        out = []
        now = time.time()
        for host in sorted(set(active) | set(reserved)):
            tasks = [*(active.get(host) or []), *(reserved.get(host) or [])]
            starts = [t.get("time_start") for t in active.get(host) or [] if t.get("time_start")]
            queues: dict[str, int] = {}
            for t in tasks:
                q = (t.get("delivery_info") or {}).get("routing_key") or "?"
                queues[q] = queues.get(q, 0) + 1
            out.append(
                {
                    "host": host,
                    "active": len(active.get(host) or []),
                    "reserved": len(reserved.get(host) or []),
                    "queues": queues,
                    "oldest_age": now - min(starts) if starts else None,
                    "tasks": [
                        {"id": t.get("id"), "name": t.get("name"), "args": str(t.get("args"))}
                        for t in tasks[:20]
                    ],
                }
            )
        return out


def registered_names(replies: dict[str, Any]) -> set[str] | None:
    """The task names in ``inspect registered`` replies (per host, a list of names, each
    perhaps followed by `` [attr=value]``); None when no worker answered."""
    if not replies:
        return None
    return {str(name).split(" [", 1)[0] for names in replies.values() for name in names or ()}
