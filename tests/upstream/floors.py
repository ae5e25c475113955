"""The lowest versions of our dependencies that we declare (pyproject.toml) and test in CI.

``python tests/upstream/floors.py constraints`` prints a pip constraints file that pins
every runtime dependency to its declared floor (``name>=X`` becomes ``name==X``); .ci/run
installs the package with it into a second virtual environment and runs a subset of the
suite there. ``python tests/upstream/floors.py check`` exits non-zero unless the installed
versions are exactly those floors (so a resolver that picked something else is caught).
``lines``, ``line NAME`` and ``subset`` print the other environments of the matrix (one
per Celery minor between the floor and the newest, and the newest on the newest Python),
the pins of one, and the Celery-facing subset they run.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]

#: The Python the floors environment runs (the lowest that ``requires-python`` admits).
FLOORS_PYTHON = "3.10"
#: The other environments .ci/run builds, each with the Celery-facing subset: one per Celery
#: minor between the floor's and the newest (pins from the package registry, kombu at its
#: newest patch of the same minor), then the newest releases of everything (no pins) on the
#: newest Python. Name -> (Python, pins).
LINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "celery54": ("3.11", ("celery==5.4.0", "kombu==5.4.2")),
    "celery55": ("3.11", ("celery==5.5.3", "kombu==5.5.4")),
    "celery56": ("3.12", ("celery==5.6.3", "kombu==5.6.2")),
    "newest": ("3.13", ()),
}
#: The Celery-facing subset (docs/testing.md, "Version matrix"): Celery round trips in a
#: worker thread, revoke, beat, the prefork pool and the quickstart's worker and beat
#: processes, commands and Flower with no app module, and the floors' own checks.
CELERY_SUBSET = (
    "tests/upstream/test_floors.py",
    "tests/cli/test_celery_no_app.py",
    "tests/test_quickstart.py::test_quickstart_runs_and_exits_by_itself",
    "tests/transport/test_celery_thread.py",
    "tests/transport/test_revoke.py",
    "tests/beat/test_beat_lifecycle.py",
    "tests/transport/test_pools.py::test_pool[prefork]",
)
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


def dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    with open(pyproject, "rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


def floors(requirements: list[str] | None = None) -> dict[str, str]:
    """``{distribution name: lowest version}`` for each runtime dependency; each must have
    exactly one ``>=`` bound (the floor we test)."""
    found: dict[str, str] = {}
    for req in requirements if requirements is not None else dependencies():
        match = _REQ.match(req)
        if not match:
            raise ValueError(f"cannot read the requirement {req!r}")
        name, _, spec = match.groups()
        lows = [part.strip()[2:].strip() for part in spec.split(",") if ">=" in part]
        if len(lows) != 1 or not lows[0]:
            raise ValueError(f"{req!r}: every dependency needs one '>=' floor")
        found[name] = lows[0]
    return found


def constraints() -> str:
    pins = floors()
    lines = [f"{name}=={low}" for name, low in pins.items()]
    # psycopg[binary] installs psycopg-binary at psycopg's own version.
    if "psycopg" in pins:
        lines.append(f"psycopg-binary=={pins['psycopg']}")
    return "\n".join(lines) + "\n"


def mismatches() -> list[str]:
    wrong = []
    pins = floors()
    if "psycopg" in pins:
        pins["psycopg-binary"] = pins["psycopg"]
    for name, low in pins.items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "not installed"
        if not _same(have, low):
            wrong.append(f"{name}: declared floor {low}, installed {have}")
    return wrong


def _same(have: str, low: str) -> bool:
    """Equal as versions ("3.1" is "3.1.0")."""
    try:
        from packaging.version import InvalidVersion, Version
    except ModuleNotFoundError:  # before the test extra is installed
        return have == low
    try:
        return Version(have) == Version(low)
    except InvalidVersion:
        return False


def line_constraints(name: str) -> str:
    """The pins of the environment ``name`` of :data:`LINES` (empty: the newest)."""
    pins = LINES[name][1]
    return "".join(f"{pin}\n" for pin in pins)


def main(argv: list[str]) -> int:
    if argv == ["constraints"]:
        sys.stdout.write(constraints())
        return 0
    if len(argv) == 2 and argv[0] == "line" and argv[1] in LINES:
        sys.stdout.write(line_constraints(argv[1]))
        return 0
    if argv == ["lines"]:  # one "name python" per line, for .ci/run
        sys.stdout.write("".join(f"{n} {py}\n" for n, (py, _) in LINES.items()))
        return 0
    if argv == ["subset"]:
        sys.stdout.write(" ".join(CELERY_SUBSET) + "\n")
        return 0
    if argv == ["check"]:
        wrong = mismatches()
        for line in wrong:
            print(f"floors: {line}", file=sys.stderr)
        if not wrong:
            print("floors: installed " + ", ".join(f"{n}=={v}" for n, v in floors().items()))
        return 1 if wrong else 0
    print("usage: floors.py constraints|check|lines|line NAME|subset", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
