"""Celery's integration suite (``t/integration`` of the installed Celery's sdist), per broker.

Each broker gets its own run directory (a copy of the sdist's ``t/`` tree, Celery's own
conftest unchanged), its own private ``redis-server`` on a free loopback port (the result
backend, and the Redis the suite's tasks and checks talk to: ``REDIS_HOST``/``REDIS_PORT``),
and its own pytest subprocess. Celery's conftest starts the session worker
(``celery_session_worker``, prefork pool, in a thread of that process) on ``TEST_BROKER``.

alkstore needs two things in that process: the ``alkstore+`` scheme, registered by
``-p kombu_alkstore`` (importing the package is all it takes), and a private schema per
run, given through the ``integration-tests-config.json`` that Celery's ``celery_config``
fixture reads from the run directory (``broker_transport_options``). Nothing else is
changed from the defaults.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.upstream import runner, sdists

#: Celery's integration modules we run, in the suite's own (file name) order: a module
#: may leave the session worker changed for the ones after it (test_worker goes last, as
#: upstream). docs/testing.md says why the others are left out.
MODULES = (
    "t/integration/test_beat.py",
    "t/integration/test_canvas.py::test_chain",
    "t/integration/test_canvas.py::test_group",
    "t/integration/test_canvas.py::test_link_error",
    "t/integration/test_canvas.py::test_result_set",
    "t/integration/test_canvas.py::test_signature_serialization",
    "t/integration/test_canvas.py::test_stamping_mechanism",
    "t/integration/test_canvas.py::test_xmap_xstarmap",
    "t/integration/test_group_chains.py",
    "t/integration/test_inspect.py",
    "t/integration/test_loader.py",
    "t/integration/test_serialization.py",
    "t/integration/test_tasks.py",
    "t/integration/test_upgrade.py",
    "t/integration/test_worker.py",
)

#: Tests left out of every run: they fail on Redis too, so they cannot be compared, and
#: cost minutes on a broker where they fail (each subtest waits for its timeout).
DESELECT = (
    # Redis: "Timeout (>20.0s)"; alkstore: 300 s of subtests, DID NOT RAISE TaskRevokedError.
    "t/integration/test_tasks.py::test_tasks::test_revoked_by_headers_complex_canvas",
    # An expected failure on Redis (Celery marks it xfail: Redis does not duplicate the
    # message); 34 s on alkstore, where the duplicate publish it forges passes the signal's
    # own arguments (a Signal object) as message properties, which JSON cannot store.
    "t/integration/test_canvas.py::test_chain::test_chord_header_id_duplicated_on_rabbitmq_msg_duplication",
)


@dataclass(frozen=True)
class Broker:
    label: str  # alkstore-postgresql, alkstore-sqlite, redis
    engine: str | None  # postgresql / sqlite for alkstore, None for Redis


BROKERS = (
    Broker("alkstore-postgresql", "postgresql"),
    Broker("alkstore-sqlite", "sqlite"),
    Broker("redis", None),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis(workdir: Path) -> Iterator[int]:
    """A throwaway ``redis-server`` on a free loopback port; stopped on exit."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise AssertionError("redis-server is required for Celery's integration suite")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [
        exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(workdir), "--logfile", str(workdir / "redis.log"),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server on port {port} did not start")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def prepare(rundir: Path, config: dict) -> Path:
    """``rundir`` with Celery's ``t/`` tree (integration tests and helpers) and settings."""
    sdist = sdists.fetch("celery")
    rundir.mkdir(parents=True)
    shutil.copytree(
        sdist / "t",
        rundir / "t",
        ignore=lambda d, names: [n for n in names if d.endswith("/t") and n in SKIP_TREES],
    )
    (rundir / "pytest.ini").write_text(
        "[pytest]\npython_classes = test_*\nxfail_strict = true\n"
        "markers =\n    flaky\n    timeout\n    celery\n    amqp\n"
    )
    (rundir / "integration-tests-config.json").write_text(json.dumps(config))
    return rundir


SKIP_TREES = {"unit", "smoke", "benchmarks"}


def present(rundir: Path, selected: tuple[str, ...] = MODULES) -> list[str]:
    """The entries of ``selected`` (``file`` or ``file::Class``) that the installed
    Celery's suite has: older lines lack some (Celery 5.4 has no ``test_beat.py``)."""
    found = []
    for entry in selected:
        file, _, cls = entry.partition("::")
        path = rundir / file
        if path.exists() and (not cls or f"class {cls}" in path.read_text()):
            found.append(entry)
    return found


@dataclass
class BrokerRun:
    broker: Broker
    running: runner.Running
    schema: str | None


def start(
    broker: Broker, rundir: Path, redis_port: int, tests: list[str] | None = None
) -> BrokerRun:
    """Start Celery's suite (``MODULES``, or the test ids ``tests``) on ``broker`` in
    ``rundir``, results on the private Redis at ``redis_port``."""
    schema = None
    config: dict = {}
    if broker.engine == "postgresql":
        schema = "c_" + uuid.uuid4().hex[:12]
        url = f"alkstore+{runner.PG_URL}"
        config["broker_transport_options"] = {"schema": schema}
    elif broker.engine == "sqlite":
        url = f"alkstore+sqlite:///{rundir / 'broker.db'}"
    else:
        url = f"redis://127.0.0.1:{redis_port}/1"
    prepare(rundir, config)
    env = runner.base_env()
    backend = f"redis://127.0.0.1:{redis_port}/0"
    if broker.engine and os.environ.get("ALKSTORE_UPSTREAM_RESULTS") == "alkstore":
        backend = "alkstore://"  # our result backend, on the broker's database and schema
    env.update(
        TEST_BROKER=url,
        TEST_BACKEND=backend,
        REDIS_HOST="127.0.0.1",
        REDIS_PORT=str(redis_port),
    )
    args = [
        *(tests or present(rundir)),
        *(f"--deselect={t}" for t in DESELECT),
        "-p", "celery.contrib.pytest",
        "-p", "kombu_alkstore",
        "-p", "no:cacheprovider",
        "-p", "no:rerunfailures",
        "-o", "timeout=300",
        "-q", "-ra", "--durations=15",
    ]  # fmt: skip
    return BrokerRun(broker, runner.Running(broker.label, rundir, args, env), schema)


@dataclass
class SuiteRuns:
    """Celery's suite on every broker of ``BROKERS``, started at once in ``base``."""

    base: Path
    runs: list[BrokerRun]
    stack: contextlib.ExitStack

    def close(self) -> None:
        """End the runs still going, then their Redis servers."""
        self.stack.close()


def start_all(base: Path) -> SuiteRuns:
    """Start the suite on every broker, each with its own private Redis."""
    stack = contextlib.ExitStack()
    runs = []
    try:
        for broker in BROKERS:
            port = stack.enter_context(private_redis(base / broker.label / "redis"))
            run = start(broker, base / broker.label / "run", port)
            stack.callback(run.running.stop)
            runs.append(run)
    except BaseException:
        stack.close()
        raise
    return SuiteRuns(base, runs, stack)


def finish(run: BrokerRun, timeout: float) -> runner.SuiteResult:
    try:
        return run.running.finish(timeout)
    finally:
        run.running.stop()
        if run.schema:
            drop_schema(run.schema)


def drop_schema(schema: str) -> None:
    with psycopg.connect(runner.PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def environment_summary() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = ("celery", "kombu", "psycopg", "redis", "pytest", "pytest-rerunfailures")
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:  # reported, not required
            found[name] = "not installed"
    return found | {"pid": str(os.getpid())}
