"""The declared version floors (pyproject.toml) are what CI's floors job installs and tests.

In the floors environment (.ci/run sets ``ALKSTORE_FLOORS=1`` there) the installed versions
must equal the floors exactly; in a matrix environment (``ALKSTORE_LINE=<name>``) they must
equal its pins; everywhere they must satisfy the floors.
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


def _minor(version_text: str) -> tuple[int, int]:
    release = Version(version_text).release
    return release[0], release[1]


def test_the_matrix_has_every_celery_minor_between_the_floor_and_the_newest():
    """The floor's minor, one environment per minor after it, then the newest: with the
    installed Celery (main run: the newest) no minor in between goes untested."""
    floor = _minor(floors.floors()["celery"])
    pinned = []
    for name, (_, pins) in floors.LINES.items():
        found = [p.split("==", 1)[1] for p in pins if p.startswith("celery==")]
        assert name == "newest" or found, f"{name} pins no celery"
        pinned += [_minor(v) for v in found]
    assert "newest" in floors.LINES and floors.LINES["newest"][1] == ()
    covered = [floor, *pinned]
    assert covered == [(floor[0], floor[1] + i) for i in range(len(covered))], covered
    if os.environ.get("ALKSTORE_FLOORS") != "1" and not os.environ.get("ALKSTORE_LINE"):
        newest = _minor(version("celery"))
        assert newest[1] <= covered[-1][1] + 1, f"no environment for the minors before {newest}"


def test_every_python_from_the_floor_to_the_newest_runs():
    pythons = [floors.FLOORS_PYTHON, *(py for py, _ in floors.LINES.values())]
    assert sorted(set(pythons), key=Version) == ["3.10", "3.11", "3.12", "3.13"]


def test_ci_runs_every_line_with_the_celery_subset():
    script = CI_RUN.read_text()
    assert "tests/upstream/floors.py lines" in script
    assert "tests/upstream/floors.py line" in script
    assert "tests/upstream/floors.py subset" in script
    for path in floors.CELERY_SUBSET:
        assert (floors.ROOT / path.split("::")[0]).exists(), path


def test_installed_versions_match_the_floors():
    if os.environ.get("ALKSTORE_FLOORS") == "1":
        assert floors.mismatches() == []
        return
    line = os.environ.get("ALKSTORE_LINE")
    if line:  # a matrix environment (.ci/run): exactly its pins
        for pin in floors.LINES[line][1]:
            name, _, want = pin.partition("==")
            assert Version(version(name)) == Version(want), f"{name} {version(name)} != {want}"
    for name, low in floors.floors().items():
        assert Version(version(name)) >= Version(low), f"{name} {version(name)} < floor {low}"
