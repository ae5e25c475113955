"""The upstream suites, started in the background as soon as the session has collected them.

Celery's and kombu's integration suites mostly wait (Celery's tests sleep through
retries, countdowns and timeouts: ``t/integration/test_tasks.py`` took 168 s of wall
time and 15 s of CPU on alkstore PostgreSQL here), so the session starts them first and
runs the rest of our suite meanwhile; each module's fixture then collects its suite's
result (:func:`take`). A module run on its own starts its suite itself. Whatever was
started and not taken is ended with the session (:func:`end`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def _celery(directory: Path) -> Any:
    from tests.upstream import celery_suite

    return celery_suite.start_all(directory)


def _kombu(directory: Path) -> Any:
    from tests.upstream import test_kombu_suite

    return test_kombu_suite.start_kombu_classes(directory)


#: Suite name -> (the test module that collects it, how to start it in a directory; what
#: that returns has ``close()``).
SUITES: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "celery": ("test_celery_suite.py", _celery),
    "kombu": ("test_kombu_suite.py", _kombu),
}
_started: dict[str, Any] = {}


def begin(modules: Iterable[str], mktemp: Callable[[str], Path]) -> None:
    """Start every suite whose test module is among ``modules`` (file names). A suite
    that cannot start keeps its error, raised by :func:`take` in its module's test, so
    the rest of the session goes on."""
    wanted = set(modules)
    for name, (module, start) in SUITES.items():
        if module in wanted and name not in _started:
            try:
                _started[name] = start(mktemp(name))
            except Exception as exc:
                _started[name] = exc


def take(name: str, directory: Callable[[], Path]) -> Any:
    """The suite ``name`` started by :func:`begin`, or started now in ``directory()``."""
    started = _started.pop(name, None)
    if isinstance(started, Exception):
        raise started
    if started is None:
        started = SUITES[name][1](directory())
    return started


def end() -> None:
    """End the suites started and never taken (a session cut short, or deselected)."""
    while _started:
        _, started = _started.popitem()
        if not isinstance(started, Exception):
            with contextlib.suppress(Exception):
                started.close()
