"""Fixtures for the operator CLI tests: a store seeded with real Celery messages."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from celery import Celery

import kombu_alkstore  # noqa: F401
from kombu_alkstore.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(target, *argv: str, broker: str | None = None, stdin: str | None = None) -> Result:
    """``main(argv)`` in-process, against ``target`` (its URL and schema); a question is
    answered from ``stdin`` (None: pytest's stdin, which cannot be read)."""
    out, err = io.StringIO(), io.StringIO()
    args = ["-b", broker or target.broker_url, "--schema", target.schema, *argv]
    code = main(args, out=out, err=err, stdin=None if stdin is None else io.StringIO(stdin))
    return Result(code, out.getvalue(), err.getvalue())


def run_module(*argv: str, env: dict | None = None, timeout: float = 60) -> Result:
    """``python -m kombu_alkstore ARGV`` in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "kombu_alkstore", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def celery_app(target) -> Celery:
    app = Celery("cli_seed", broker=target.broker_url, set_as_current=False)
    app.conf.broker_transport_options = target.transport_options
    return app


class Seeder:
    """Publishes real Celery task messages, then kills them through the store API."""

    def __init__(self, target) -> None:
        self.target = target
        self.app = celery_app(target)
        self.store = target.open()

    def send(self, name: str, args=(), kwargs=None, queue: str = "celery", **options) -> str:
        result = self.app.send_task(name, args=args, kwargs=kwargs or {}, queue=queue, **options)
        return result.id

    def kill(self, queue: str = "celery", error: str = "boom", n: int = 100) -> list[int]:
        """Claim up to ``n`` due messages of ``queue`` and dead-letter them with ``error``."""
        deliveries = self.store.claim([queue], n)
        self.store.fail(deliveries, error)
        return [d.id for d in deliveries]

    def dead(self, name: str, args=(), kwargs=None, queue: str = "celery", error="boom"):
        """One dead letter for a task call; returns (dead-letter id, task id)."""
        task_id = self.send(name, args, kwargs, queue=queue)
        (job_id,) = self.kill(queue, error, n=1)
        return job_id, task_id

    def close(self) -> None:
        self.app.close()
        self.store.close()


@pytest.fixture
def seeder(target):
    s = Seeder(target)
    yield s
    s.close()
