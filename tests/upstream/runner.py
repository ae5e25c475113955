"""Run an upstream test suite in a pytest subprocess and read its JUnit XML."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_HOST = "127.0.0.1"


@dataclass
class SuiteResult:
    """Outcome per test id (``module::Class::test[param]``): passed, failed or skipped."""

    label: str
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    returncode: int | None = None
    log: Path | None = None

    def ids(self, outcome: str) -> set[str]:
        return {t for t, o in self.outcomes.items() if o == outcome}

    @property
    def passed(self) -> set[str]:
        return self.ids("passed")

    @property
    def failed(self) -> set[str]:
        return self.ids("failed")

    def summary(self) -> str:
        counts = {o: len(self.ids(o)) for o in ("passed", "failed", "skipped")}
        return (
            f"{self.label}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped of {len(self.outcomes)} in {self.seconds:.0f} s"
        )

    def as_json(self) -> dict:
        return {
            "label": self.label,
            "seconds": round(self.seconds, 1),
            "returncode": self.returncode,
            "outcomes": self.outcomes,
        }


def case_id(case: ET.Element, rundir: Path) -> str:
    """``t/integration/test_x.py::Class::name`` from a JUnit testcase element: the module
    is the longest dotted prefix of its classname that is a file in ``rundir``."""
    parts = case.get("classname", "").split(".")
    for i in range(len(parts), 0, -1):
        module = "/".join(parts[:i]) + ".py"
        if (rundir / module).is_file():
            return "::".join([module, *parts[i:], case.get("name", "")])
    return "::".join([*parts, case.get("name", "")])


def read_junit(path: Path, result: SuiteResult) -> None:
    tree = ET.parse(path)
    # The suite's own time: it may have ended long before its result was collected.
    suite = tree.getroot() if tree.getroot().tag == "testsuite" else tree.find("testsuite")
    if suite is not None and suite.get("time"):
        result.seconds = float(suite.get("time"))
    for case in tree.iter("testcase"):
        tid = case_id(case, path.parent)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            outcome = "failed"
            result.messages[tid] = (failure.get("message") or "")[:500]
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        # An error in teardown after a pass is reported as a second testcase entry.
        if result.outcomes.get(tid) == "failed":
            continue
        result.outcomes[tid] = outcome


class Running:
    """A pytest subprocess, started at once; :meth:`finish` waits for it and reads its result."""

    def __init__(self, label: str, rundir: Path, args: list[str], env: dict[str, str]):
        self.label = label
        self.rundir = rundir
        self.junit = rundir / f"junit-{label}.xml"
        self.log = rundir / f"pytest-{label}.log"
        cmd = [sys.executable, "-m", "pytest", *args, f"--junitxml={self.junit}"]
        cmd += ["-o", "junit_family=xunit1"]
        self.start = time.monotonic()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=rundir, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def finish(self, timeout: float) -> SuiteResult:
        """Wait (at most ``timeout`` seconds from the start), end the process group, read
        the JUnit report."""
        result = SuiteResult(self.label, log=self.log)
        try:
            left = max(1.0, timeout - (time.monotonic() - self.start))
            result.returncode = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            result.returncode = None
        finally:
            self.stop()
        result.seconds = time.monotonic() - self.start  # replaced by the report's own time
        if not self.junit.exists():
            raise AssertionError(
                f"{self.label}: pytest wrote no JUnit report (exit {result.returncode}, "
                f"{'timed out' if result.returncode is None else 'ended'} after "
                f"{result.seconds:.0f} s); log tail:\n{tail(self.log)}"
            )
        read_junit(self.junit, result)
        return result

    def stop(self) -> None:
        _end_group(self.proc)

    close = stop


def _end_group(proc: subprocess.Popen) -> None:
    """End the pytest process and everything it started (its worker's pool children)."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    # Leftovers of the group (e.g. orphaned pool children) go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["ALKSTORE_TEST_PG"] = PG_URL
    return env


def write_report(name: str, results: list[SuiteResult], extra: dict | None = None) -> Path:
    """Keep the results of this run as JSON (``$ALKSTORE_UPSTREAM_REPORT`` or the cache),
    the source of the table in docs/reliability.md."""
    from tests.upstream.sdists import cache_dir

    where = Path(os.environ.get("ALKSTORE_UPSTREAM_REPORT") or cache_dir() / "reports")
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.json"
    data = {"results": [r.as_json() for r in results], **(extra or {})}
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    return path
