"""The store's contract, run unchanged against every engine (PostgreSQL and SQLite).

Every test takes the ``store`` (or ``target``) fixture (tests/conftest.py), which is
parametrized over the engines; each test gets a private PostgreSQL schema or SQLite file.
Timing tests use a tiny visibility timeout (0.3 s) and short sleeps. A test that needs
what only some engines can do asks ``store.capabilities`` and skips, by name, only what
an engine declares it lacks. Helpers and constants: helpers.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kombu_alkstore.store import Store


@pytest.fixture
def opener(target) -> Iterator:
    """Open more stores on the test's target (other options, or "another process")."""
    opened: list[Store] = []

    def open_(**options) -> Store:
        s = target.open(**options)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()
