"""Celery's own integration suite, from the sdist of the installed Celery, on alkstore.

The selected modules (``celery_suite.MODULES``; docs/testing.md says why these) run three
times, at the same time, in separate pytest subprocesses: with ``TEST_BROKER`` on alkstore
PostgreSQL, on alkstore SQLite and on Redis, results on a private Redis each. A test that
passes on Redis must pass on alkstore, or be listed, with the reason, in
``celery_exceptions.txt`` (mirrored in docs/reliability.md). The list is strict: a listed
test that passes on its engine fails this test too.

A test that failed on alkstore but passed on Redis is run once more on its own (same
broker, a fresh run) before it counts: the machine is shared, and Celery's own CI reruns
these tests up to five times (pytest-rerunfailures), which the full runs here leave out to
keep within the CI time.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.upstream import celery_suite, early, runner
from tests.upstream.expectations import CELERY_EXCEPTIONS, may_pass, read_list

#: Seconds one broker's run may take from its start (all three run at once, beside the
#: rest of the session: see early.py).
RUN_TIMEOUT = 1500

#: The module's fixture runs the whole upstream suite (inside the first test's setup).
pytestmark = [pytest.mark.timeout(RUN_TIMEOUT * 2 + 300), pytest.mark.slow]


@pytest.fixture(scope="module")
def celery_results(tmp_path_factory) -> dict[str, runner.SuiteResult]:
    # Started with the session (tests/upstream/early.py), or now when run on its own.
    started = early.take("celery", lambda: tmp_path_factory.mktemp("celery-suite"))
    base = started.base
    with contextlib.closing(started):
        results = {run.broker.label: celery_suite.finish(run, RUN_TIMEOUT) for run in started.runs}
    rerun = _rerun_differences(results, base)
    runner.write_report(
        "celery",
        list(results.values()),
        {
            "versions": celery_suite.environment_summary(),
            "modules": celery_suite.present(started.runs[0].running.rundir),
            "rerun": {label: r.outcomes for label, r in rerun.items()},
        },
    )
    return results


def _rerun_differences(
    results: dict[str, runner.SuiteResult], base
) -> dict[str, runner.SuiteResult]:
    """Run once more, on its broker, each test that failed on alkstore, passed on Redis
    and is not listed (both engines at once); a pass the second time replaces the failure
    (the report keeps both)."""
    redis_passed = results["redis"].passed
    listed = _exceptions()
    suspects = {}
    for broker in celery_suite.BROKERS:
        if broker.engine is not None:
            failed = results[broker.label].failed & redis_passed
            tests = sorted(t for t in failed if (t, broker.engine) not in listed)
            if tests:
                suspects[broker] = tests
    if not suspects:
        return {}
    reruns: dict[str, runner.SuiteResult] = {}
    with contextlib.ExitStack() as stack:
        runs = []
        for broker, tests in suspects.items():
            label = f"{broker.label}-rerun"
            port = stack.enter_context(celery_suite.private_redis(base / label / "redis"))
            rerun_broker = celery_suite.Broker(label, broker.engine)
            runs.append(
                (broker, celery_suite.start(rerun_broker, base / label / "run", port, tests))
            )
        try:
            for broker, run in runs:
                again = reruns[run.broker.label] = celery_suite.finish(run, RUN_TIMEOUT)
                result = results[broker.label]
                for test in again.passed & set(suspects[broker]):
                    result.outcomes[test] = "passed"
                    result.messages[test] = "failed in the full run, passed when run again"
        finally:
            for _, run in runs:
                run.running.stop()
    return reruns


def _exceptions() -> dict[tuple[str, str], str]:
    return read_list(CELERY_EXCEPTIONS)


def test_redis_baseline_ran(celery_results):
    redis = celery_results["redis"]
    assert len(redis.passed) > 100, redis.summary() + "\n" + runner.tail(redis.log)


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_alkstore_passes_what_redis_passes(celery_results, engine):
    """Failing on alkstore and passing on Redis == listed for this engine (strict)."""
    result = celery_results[f"alkstore-{engine}"]
    redis = celery_results["redis"]
    assert result.outcomes, result.summary() + "\n" + runner.tail(result.log)
    entries = {test: reason for (test, e), reason in _exceptions().items() if e == engine}
    listed = set(entries)
    regressions = sorted((result.failed & redis.passed) - listed)
    fixed = sorted(t for t in listed & result.passed if not may_pass(entries[t]))
    missing = sorted(listed - set(result.outcomes))
    lines = [result.summary(), redis.summary()]
    lines += [
        f"FAILS ON {engine}, PASSES ON REDIS: {t}: {result.messages.get(t, '')}"
        for t in regressions
    ]
    lines += [f"PASSES NOW on {engine} (remove it from celery_exceptions.txt): {t}" for t in fixed]
    lines += [f"LISTED BUT NOT RUN on {engine}: {t}" for t in missing]
    assert not (regressions or fixed or missing), "\n".join(lines) + f"\nlog: {result.log}"
