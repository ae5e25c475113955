"""The lowest versions of our dependencies that we declare (pyproject.toml) and test in CI.

``python tests/upstream/floors.py constraints`` prints a pip constraints file that pins
every runtime dependency to its declared floor (``name>=X`` becomes ``name==X``); .ci/run
installs the package with it into a second virtual environment and runs a subset of the
suite there. ``python tests/upstream/floors.py check`` exits non-zero unless the installed
versions are exactly those floors (so a resolver that picked something else is caught).
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


def main(argv: list[str]) -> int:
    if argv == ["constraints"]:
        sys.stdout.write(constraints())
        return 0
    if argv == ["check"]:
        wrong = mismatches()
        for line in wrong:
            print(f"floors: {line}", file=sys.stderr)
        if not wrong:
            print("floors: installed " + ", ".join(f"{n}=={v}" for n, v in floors().items()))
        return 1 if wrong else 0
    print("usage: floors.py constraints|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
