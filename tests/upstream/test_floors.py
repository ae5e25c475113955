"""The declared version floors (pyproject.toml) are what CI's floors job installs and tests.

In the floors environment (.ci/run sets ``ALKSTORE_FLOORS=1`` there) the installed versions
must equal the floors exactly; anywhere else they must satisfy them.
"""

from __future__ import annotations

import os
from importlib.metadata import version

from packaging.version import Version

from tests.upstream import floors

CI_RUN = floors.ROOT / ".ci" / "run"


def test_every_runtime_dependency_declares_one_floor():
    pins = floors.floors()
    assert set(pins) == {"kombu", "celery", "psycopg", "psycopg-pool", "SQLAlchemy"}


def test_constraints_pin_exactly_the_floors():
    pins = floors.floors()
    lines = floors.constraints().split()
    assert lines[: len(pins)] == [f"{name}=={low}" for name, low in pins.items()]
    assert f"psycopg-binary=={pins['psycopg']}" in lines


def test_floors_read_from_requirements():
    assert floors.floors(["psycopg[binary]>=3.3.0", "kombu >= 5.4.0, <6"]) == {
        "psycopg": "3.3.0",
        "kombu": "5.4.0",
    }
    for bad in ("kombu", "kombu<6", "kombu>=5.4,>=5.5"):
        try:
            floors.floors([bad])
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted without a single floor")


def test_ci_runs_the_floors_job():
    script = CI_RUN.read_text()
    assert "tests/upstream/floors.py constraints" in script
    assert "tests/upstream/floors.py check" in script
    assert "ALKSTORE_FLOORS=1" in script


def test_installed_versions_match_the_floors():
    if os.environ.get("ALKSTORE_FLOORS") == "1":
        assert floors.mismatches() == []
        return
    for name, low in floors.floors().items():
        assert Version(version(name)) >= Version(low), f"{name} {version(name)} < floor {low}"
