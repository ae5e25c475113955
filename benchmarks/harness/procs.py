"""Subprocesses: the ``celery worker``, the publishing client, py-spy; CPU accounting."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from .tasks_module import TASKS_MODULE

#: Pools and concurrency the issue asks for.
POOLS = {"prefork": 2, "threads": 4}
#: A broker-independent worker: no gossip, mingle or heartbeat events (see docs/benchmarks.md).
WORKER_FLAGS = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a subprocess's whole process group (it runs in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


class Worker:
    """A ``celery worker`` in its own session; ``kill`` SIGKILLs the whole group."""

    def __init__(
        self, workdir: Path, env: dict[str, str], logfile: Path, pool: str, loglevel: str
    ) -> None:
        self.logfile = logfile
        self.out = open(logfile, "ab")  # noqa: SIM115  (closed by kill)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                TASKS_MODULE,
                "worker",
                f"--pool={pool}",
                f"--concurrency={POOLS[pool]}",
                f"--loglevel={loglevel}",
                f"--hostname=bench-{uuid.uuid4().hex[:8]}@%h",
                *WORKER_FLAGS,
            ],
            cwd=workdir,
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self.started = time.time()

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the worker exited (status {self.proc.returncode})")

    def cpu_seconds(self) -> float:
        return group_cpu_seconds(self.pid)

    def kill(self) -> None:
        kill_group(self.proc)
        self.out.close()


class Client:
    """The tasks module as a long-lived publishing client: one command per stdin line,
    one JSON line back (``publish N``, ``probe N INTERVAL``); its connection stays warm."""

    def __init__(self, workdir: Path, env: dict[str, str], logfile: Path) -> None:
        self.err = open(logfile, "ab")  # noqa: SIM115  (closed by close)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", TASKS_MODULE],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            start_new_session=True,
        )
        self._reply(60, "start")

    def _reply(self, timeout: float, what: str) -> dict:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError(f"client {what}: no answer in {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"client {what}: it exited (status {self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"client {what}: {reply['error']}")
        return reply

    def call(self, args: list[str], timeout: float) -> dict:
        self.send(args)
        return self._reply(timeout, " ".join(args))

    def send(self, args: list[str]) -> None:
        """Send a command without waiting (read its reply with :meth:`receive`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((" ".join(args) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self, timeout: float, what: str) -> dict:
        return self._reply(timeout, what)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # EOF: it closes its app and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        kill_group(self.proc)
        self.err.close()


def proc_stats() -> Iterator[tuple[int, list[str]]]:
    """``(pid, fields)`` of every live process, ``fields`` being ``/proc/PID/stat`` after
    the command name (which may hold spaces): ``fields[0]`` is stat field 3 (state)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        yield int(entry), stat[stat.rindex(")") + 2 :].split()


def group_cpu_seconds(session: int) -> float:
    """User+system CPU seconds of every live process in a session (the worker's group)."""
    ticks = 0
    for _, fields in proc_stats():
        if int(fields[3]) == session:  # field 6: session id
            ticks += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


class PySpy:
    """``py-spy record -f raw`` on a process (and its pool children) until ``stop``."""

    def __init__(self, pid: int, output: Path, rate: int = 250) -> None:
        exe = shutil.which("py-spy")
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.output = output
        self.log = open(output.with_suffix(".log"), "ab")  # noqa: SIM115  (closed by stop)
        self.proc = subprocess.Popen(
            [exe, "record", "-f", "raw", "-r", str(rate), "--subprocesses", "-p", str(pid)]
            + ["-o", str(output), "--nonblocking"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        """SIGINT makes py-spy write its file; SIGKILL the group if it does not exit."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
        self.log.close()


def log_problems(logfile: Path) -> list[str]:
    """Warning/error lines of a worker log (the log level hides everything routine)."""
    if not logfile.exists():
        return []
    pattern = re.compile(r"WARNING|ERROR|CRITICAL|Traceback|Exception")
    lines = [ln.strip() for ln in logfile.read_text(errors="replace").splitlines()]
    return [ln for ln in lines if pattern.search(ln)]


def tail(logfile: Path, n: int = 30) -> str:
    if not logfile.exists():
        return "(no log)"
    return "\n".join(logfile.read_text(errors="replace").splitlines()[-n:])
