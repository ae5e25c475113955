"""Summarise ``py-spy record -f raw`` files: the top functions by own and inclusive samples.

    python -m benchmarks.harness.pyspy_top FILE... [--only SUBSTR] [--drop SUBSTR] [-n 25]

``--only asynloop`` keeps the stacks through Celery's event loop (the worker's main
process, start-up excluded); ``--only workloop`` the prefork pool children; ``--drop``
removes stacks with a matching frame (e.g. ``_bootstrap_inner`` for background threads).
Line numbers are folded: a function counts once per stack.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def fold(frame: str) -> str:
    """``poll (kombu/utils/eventio.py:83)`` → ``poll (…/kombu/utils/eventio.py)``."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("site-packages/", "lib/python3", "/work/main/", "celery-bench-"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{m.group('fn')} ({path})"


def load(paths: list[Path], only: list[str], drop: list[str]) -> list[tuple[list[str], int]]:
    stacks = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            frames = m.group(1).split(";")
            if only and not all(any(o in f for f in frames) for o in only):
                continue
            if any(d in f for d in drop for f in frames):
                continue
            stacks.append((frames, int(m.group(2))))
    return stacks


def summary(stacks: list[tuple[list[str], int]], n: int) -> str:
    total = sum(c for _, c in stacks)
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for frames, count in stacks:
        folded = [fold(f) for f in frames if not f.startswith("process ")]
        if folded:
            own[folded[-1]] += count
        for f in set(folded):
            incl[f] += count
    out = [f"{total} samples"]
    if not total:
        return out[0]
    out.append("\nown (leaf) samples:")
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in own.most_common(n)]
    out.append("\ninclusive samples:")
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in incl.most_common(n)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--only", action="append", default=[], help="keep stacks with this frame")
    p.add_argument("--drop", action="append", default=[], help="drop stacks with this frame")
    p.add_argument("-n", type=int, default=25)
    args = p.parse_args(argv)
    print(summary(load(args.files, args.only, args.drop), args.n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
