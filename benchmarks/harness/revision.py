"""Run a standalone benchmark script against the ``kombu_alkstore`` of a git revision.

A script calls :func:`adopt` before importing ``kombu_alkstore`` (it puts the extracted
package first on ``sys.path`` when the script runs as such a rerun) and :func:`rerun`
from its ``main`` when it is not (``--rev REV``; ``worktree``: the working tree as is).
This module imports nothing of the harness's at load, so it can come first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Set in a rerun: "<short sha>=<path of the extracted package's parent>".
ENV = "ALKSTORE_BENCH_REV"


def adopt() -> str:
    """Put the rerun's package first on ``sys.path``; return its revision
    (``worktree`` outside a rerun)."""
    if ENV not in os.environ:
        return "worktree"
    sha, path = os.environ[ENV].split("=", 1)
    if path not in sys.path:
        sys.path.insert(0, path)
    return sha


def rerunning(rev: str) -> bool:
    """True when ``rev`` asks for a revision this process does not run yet."""
    return rev != "worktree" and ENV not in os.environ


def rerun(rev: str, script: str, argv: list[str]) -> int:
    """Run ``script`` again with ``argv``, ``rev``'s package first on its path; its
    exit status."""
    from .cli import checkout  # the harness's (it imports kombu_alkstore's users)

    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="alk-bench-rev-") as tmp:
        path = checkout(sha, Path(tmp) / "rev")
        env = dict(os.environ, **{ENV: f"{sha}={path}"})
        return subprocess.call([sys.executable, script, *argv], env=env)
