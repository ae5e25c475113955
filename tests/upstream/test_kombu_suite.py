"""kombu's own integration classes, from the sdist of the installed kombu, on alkstore.

``BasicFunctionality``, ``BaseExchangeTypes``, ``BaseTimeToLive``, ``BasePriority``,
``BaseMessage``, ``BaseEventLoop`` and ``BaseFailover`` (``t/integration/common.py``) run
in a pytest subprocess through ``alkstore_kombu_classes.py`` on PostgreSQL and SQLite,
each test on a fresh schema or file. Every test must pass; the only exceptions are the
defects still open, listed strictly in ``kombu_open.txt``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pytest

from tests.upstream import early, runner, sdists
from tests.upstream.expectations import KOMBU_OPEN, may_pass, read_list

HERE = Path(__file__).resolve().parent
CLASSES = (
    "BasicFunctionality",
    "BaseExchangeTypes",
    "BaseTimeToLive",
    "BasePriority",
    "BaseMessage",
    "BaseEventLoop",
    "BaseFailover",
)
#: Our subclass of each upstream class (alkstore_kombu_classes.py).
SUBCLASS = {
    "BasicFunctionality": "test_AlkstoreBasicFunctionality",
    "BaseExchangeTypes": "test_AlkstoreBaseExchangeTypes",
    "BaseTimeToLive": "test_AlkstoreBaseTimeToLive",
    "BasePriority": "test_AlkstorePriority",
    "BaseMessage": "test_AlkstoreMessage",
    "BaseEventLoop": "test_AlkstoreEventLoop",
    "BaseFailover": "test_AlkstoreFailover",
}
MODULE = "t/integration/test_alkstore.py"
_ENGINE_PARAM = re.compile(r"\[(postgresql|sqlite)\]$")


def split_engine(test_id: str) -> tuple[str, str]:
    """(id without the engine parameter, engine); unparametrized tests run on PostgreSQL
    (the failover fixture)."""
    match = _ENGINE_PARAM.search(test_id)
    if match:
        return test_id[: match.start()], match.group(1)
    return test_id, "postgresql"


def prepare(rundir: Path) -> Path:
    """A tree with kombu's ``t/integration/common.py`` and our subclasses beside it."""
    sdist = sdists.fetch("kombu")
    integration = rundir / "t" / "integration"
    integration.mkdir(parents=True)
    (rundir / "t" / "__init__.py").write_text("")
    for name in ("__init__.py", "common.py"):
        shutil.copy(sdist / "t" / "integration" / name, integration / name)
    shutil.copy(HERE / "alkstore_kombu_classes.py", integration / "test_alkstore.py")
    (rundir / "pytest.ini").write_text("[pytest]\npython_classes = test_*\n")
    return rundir


#: Seconds the run may take from its start (beside the rest of the session: early.py).
RUN_TIMEOUT = 1200


def start_kombu_classes(rundir: Path) -> runner.Running:
    """Start the classes' pytest subprocess in ``rundir``."""
    prepare(rundir)
    args = [MODULE, "-p", "no:cacheprovider", "-o", "timeout=120", "-q", "-ra"]
    return runner.Running("kombu-alkstore", rundir, args, runner.base_env())


#: The module's fixture runs the whole upstream suite (inside the first test's setup).
pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]


@pytest.fixture(scope="module")
def kombu_result(tmp_path_factory) -> runner.SuiteResult:
    # Started with the session (tests/upstream/early.py), or now when run on its own.
    running = early.take("kombu", lambda: tmp_path_factory.mktemp("kombu-suite"))
    with contextlib.closing(running):
        result = running.finish(RUN_TIMEOUT)
    by_engine = {}
    for tid, outcome in result.outcomes.items():
        _, engine = split_engine(tid)
        by_engine.setdefault(engine, []).append(outcome)
    runner.write_report(
        "kombu",
        [result],
        {
            "per_class": per_class(result),
            "engines": {
                e: {"passed": o.count("passed"), "total": len(o)} for e, o in by_engine.items()
            },
        },
    )
    return result


def per_class(result: runner.SuiteResult) -> dict[str, dict[str, list[int]]]:
    """``{class: {engine: [passed, total]}}``."""
    table: dict[str, dict[str, list[int]]] = {}
    for cls in CLASSES:
        row = table.setdefault(cls, {"postgresql": [0, 0], "sqlite": [0, 0]})
        for tid, outcome in result.outcomes.items():
            if tid.split("::")[1] != SUBCLASS[cls]:
                continue
            _, engine = split_engine(tid)
            row[engine][1] += 1
            row[engine][0] += outcome == "passed"
    return table


def test_every_class_ran_on_both_engines(kombu_result):
    table = per_class(kombu_result)
    for cls, row in table.items():
        assert row["postgresql"][1] > 0, f"{cls}: no test ran on PostgreSQL"
        assert row["sqlite"][1] > 0, f"{cls}: no test ran on SQLite"
    assert not kombu_result.ids("skipped"), f"skipped: {sorted(kombu_result.ids('skipped'))}"


def test_kombu_classes_pass(kombu_result):
    """Every test passes, but for the open defects listed in kombu_open.txt (strict)."""
    failed = {split_engine(t): kombu_result.messages.get(t, "") for t in kombu_result.failed}
    expected = read_list(KOMBU_OPEN)
    unexpected = {k: v for k, v in failed.items() if k not in expected}
    fixed = sorted(k for k in expected if k not in failed and not may_pass(expected[k]))
    report = [kombu_result.summary()]
    report += [f"FAILED {t} [{e}]: {msg}" for (t, e), msg in sorted(unexpected.items())]
    report += [f"DID NOT FAIL (remove it from kombu_open.txt): {t} [{e}]" for t, e in fixed]
    assert not unexpected and not fixed, "\n".join(report) + "\nlog: " + str(kombu_result.log)
