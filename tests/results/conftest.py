"""Result-backend tests: apps whose broker and backend are both alkstore."""

from __future__ import annotations

import contextlib

import pytest

from kombu_alkstore.results.watcher import close_all_watchers


@pytest.fixture(autouse=True)
def _close_watchers():
    """The listeners of a test's backends go with it (before the stores close)."""
    yield
    with contextlib.suppress(Exception):
        close_all_watchers()
