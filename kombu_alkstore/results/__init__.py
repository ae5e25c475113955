"""A Celery result backend on the store: ``result_backend = "alkstore+postgresql://…"``.

* ``backend.py``: :class:`ResultBackend` (Celery's key/value backend API on the
  ``results`` table, with Celery's async API: push ``get()``).
* ``config.py``: which database and store options a backend uses.
* ``watcher.py``: one listener per process and database, shared by every waiter.
* ``consumer.py``: Celery's result consumer on that watcher.
* ``chord.py``: native chords (a counter per chord, the callback published once).

See docs/results.md.
"""

from __future__ import annotations

__all__ = ["ResultBackend"]


def __getattr__(name: str):  # lazy: importing the package must not import Celery's backends
    if name == "ResultBackend":
        from .backend import ResultBackend

        return ResultBackend
    raise AttributeError(name)
