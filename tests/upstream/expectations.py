"""The data files that list upstream tests allowed to fail on alkstore, with their reasons.

Format, one test a line: ``<test id> | <engines> | <reason>``, where engines is
``postgresql``, ``sqlite`` or ``postgresql,sqlite``; ``#`` starts a comment line. A test id
is ``t/integration/<module>.py::<Class>::<test>[<param>]`` as pytest names it. The lists
are strict: a listed test that passes on a listed engine fails the run too (remove it),
unless the engine is written with a ``?`` (``sqlite?``): the test fails there only at
times, so it may pass or fail (say in the reason how often it was seen failing).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CELERY_EXCEPTIONS = HERE / "celery_exceptions.txt"
KOMBU_OPEN = HERE / "kombu_open.txt"


ENGINES = ("postgresql", "sqlite")


def read_list(path: Path) -> dict[tuple[str, str], str]:
    """``{(test id, engine): reason}`` from one of the lists; see :func:`may_pass`."""
    entries: dict[tuple[str, str], str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split("|", 2)]
        if len(parts) != 3 or not all(parts):
            raise ValueError(
                f"{path.name}:{number}: expected '<test id> | <engines> | <reason>': {raw!r}"
            )
        test, engines, reason = parts
        for engine in (e.strip() for e in engines.split(",")):
            flaky = engine.endswith("?")
            engine = engine.rstrip("?")
            if engine not in ENGINES:
                raise ValueError(f"{path.name}:{number}: unknown engine {engine!r}")
            if (test, engine) in entries:
                raise ValueError(f"{path.name}:{number}: {test} listed twice for {engine}")
            entries[(test, engine)] = ("(may pass) " if flaky else "") + reason
    return entries


def may_pass(reason: str) -> bool:
    """The entry was written ``engine?``: the test fails there only at times."""
    return reason.startswith("(may pass) ")
