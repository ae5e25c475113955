"""Wake-ups on SQLite: a consumer's connection polling ``PRAGMA data_version``."""

from __future__ import annotations

import time

from ..waiter import Waiter, Wakeup
from .connection import connect


class SQLiteWaiter(Waiter):
    """Polls ``PRAGMA data_version`` on its own connection: it changes on others' commits
    (of every process on the file), so a wake-up says only that something changed
    (``Wakeup.any``). No socket to select on, no hand-off."""

    interval = 0.005

    def __init__(self, path: str, busy_timeout: float, data_version: str) -> None:
        """``data_version``: the statement reading the file's data version."""
        self._sql = data_version
        self._conn = connect(path, busy_timeout)
        self._version = self._read()

    def _read(self) -> int:
        return self._conn.execute(self._sql).fetchone()["data_version"]

    def fileno(self) -> int | None:
        return None

    def poll(self) -> Wakeup:
        version = self._read()
        changed, self._version = version != self._version, version
        return Wakeup(any=changed)

    def wait(self, timeout: float) -> Wakeup:
        end = time.monotonic() + max(timeout, 0)
        while True:
            wake = self.poll()
            if wake or time.monotonic() >= end:
                return wake
            time.sleep(min(self.interval, max(end - time.monotonic(), 0)))

    def close(self) -> None:
        self._conn.close()
