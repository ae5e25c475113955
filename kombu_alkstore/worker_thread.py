"""A daemon thread of this library's own (the heartbeats, housekeeping, the claim floors' watch),
started on demand and stopped with its owner."""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("kombu_alkstore")


class WorkerThread:
    """Runs ``self._run(stop)`` in one daemon thread named ``name`` at a time.

    :meth:`ensure_started` starts it unless it runs (thread-safe; :meth:`_starting` runs
    first, under the lock); :meth:`stop` sets its stop event and joins it for up to
    ``join_timeout`` seconds (not from the thread itself). A later start makes a new one.
    A thread that waits with :meth:`_wait` is ended early by :meth:`wake` and by
    :meth:`stop`.
    """

    name = "alkstore-thread"
    join_timeout = 5.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._woken.clear()
                self._starting()
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name=self.name, daemon=True
                )
                self._thread.start()

    def wake(self) -> None:
        """End the thread's current :meth:`_wait` at once."""
        self._woken.set()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            self._woken.set()  # out of its wait at once
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.join_timeout)

    @staticmethod
    def _failed(what: str, exc: BaseException, then: str) -> None:
        """Log that one round of ``what`` raised ``exc`` (a warning naming the error),
        and ``then``, what happens next."""
        logger.warning(
            "alkstore: %s failed (%s: %s); %s", what, type(exc).__name__, str(exc).strip(), then
        )

    def _wait(self, stop: threading.Event, timeout: float) -> bool:
        """Wait ``timeout`` seconds, or until woken or stopped; True if stopped."""
        self._woken.wait(timeout)
        self._woken.clear()
        return stop.is_set()

    def _starting(self) -> None:
        """Called under the lock just before a new thread starts."""

    def _run(self, stop: threading.Event) -> None:  # pragma: no cover - overridden
        raise NotImplementedError
