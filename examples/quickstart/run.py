#!/usr/bin/env python3
"""The README's main job: a Celery worker and beat on an embedded SQLite broker.

    python examples/quickstart/run.py

Starts a real ``celery worker`` and ``celery beat -S alkstore`` as subprocesses on a
temporary SQLite file, sends a few tasks (one with a countdown), waits for the periodic
task from beat, shows a dead letter with the operator CLI, then stops everything and
exits: 0 when every step completed, 1 otherwise. It needs no server and ends by itself
in about 15 seconds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT = 20.0  # seconds any one step may take


def log(msg: str) -> None:
    print(msg, flush=True)


class Runner:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="alkstore-quickstart-"))
        self.broker = f"alkstore+sqlite:///{self.tmp / 'broker.db'}"
        self.ticks = self.tmp / "ticks.log"
        self.env = dict(
            os.environ,
            QUICKSTART_BROKER=self.broker,
            QUICKSTART_TICKS=str(self.ticks),
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        )
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    # ------------------------------------------------------------ subprocesses
    def start(self, name: str, *args: str) -> None:
        logfile = self.tmp / f"{name}.log"
        with open(logfile, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tasks", *args],
                cwd=self.tmp,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole
            )
        self.procs.append((name, proc, logfile))
        log(f"started: celery {' '.join(args)}  (pid {proc.pid})")

    def stop_all(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # warm shutdown
        deadline = time.monotonic() + 10
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def show_logs(self) -> None:
        for name, _, logfile in self.procs:
            text = logfile.read_text(errors="replace").strip().splitlines()
            log(f"--- last lines of the {name} log ---")
            for line in text[-25:]:
                log(f"    {line}")

    def check_alive(self) -> None:
        for name, proc, _ in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"the {name} exited early (status {proc.returncode})")

    # -------------------------------------------------------------------- job
    def main(self) -> int:
        os.environ.update(QUICKSTART_BROKER=self.broker, QUICKSTART_TICKS=str(self.ticks))
        sys.path.insert(0, str(HERE))
        import tasks

        log(f"broker: {self.broker}")
        self.start("worker", "worker", "--loglevel=INFO", "--concurrency=2")
        beat = importlib.util.find_spec("celery_beat_alkstore") is not None
        if beat:
            self.start("beat", "beat", "-S", "alkstore", "--loglevel=INFO")
        else:
            log("beat: skipped (celery_beat_alkstore is not installed)")

        t0 = time.time()
        r1 = tasks.add.delay(2, 3)
        r2 = tasks.now.apply_async(countdown=3)
        results = [tasks.add.delay(i, i) for i in range(10)]
        log("sent: add(2, 3), now() with countdown=3, add(i, i) for i in 0..9")

        value = r1.get(timeout=TIMEOUT)
        log(
            f"  ok  add(2, 3) = {value}  ({time.time() - t0:.2f}s after sending, "
            "incl. worker start-up)"
        )
        assert value == 5, value
        values = [r.get(timeout=TIMEOUT) for r in results]
        assert values == [2 * i for i in range(10)], values
        log(f"  ok  add(i, i) for i in 0..9 = {values}")

        ran_at = r2.get(timeout=TIMEOUT)
        log(f"  ok  countdown task ran {ran_at - t0:.2f}s after it was sent (countdown=3)")
        assert ran_at - t0 >= 2.9, ran_at - t0

        if beat:
            deadline = time.monotonic() + TIMEOUT
            while not (self.ticks.exists() and len(self.ticks.read_text().split()) >= 2):
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError("no periodic task from beat within the time limit")
                time.sleep(0.2)
            times = [float(t) for t in self.ticks.read_text().split()]
            log(
                f"  ok  periodic task 'tick' from beat ran {len(times)} times, "
                f"{times[1] - times[0]:.2f}s apart (schedule: every 2s)"
            )

        # A task that refuses its message: it becomes a dead letter, visible to operators.
        bad = tasks.broken.delay(42)
        cli = [sys.executable, "-m", "kombu_alkstore", "-b", self.broker]
        deadline = time.monotonic() + TIMEOUT
        while True:
            out = subprocess.run(
                [*cli, "dead", "list"], capture_output=True, text=True, env=self.env
            )
            if bad.id in out.stdout:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no dead letter for {bad.id}: {out.stdout}{out.stderr}")
            time.sleep(0.2)
        log("  ok  broken(42) was rejected and dead-lettered; `kombu-alkstore dead list`:")
        for line in out.stdout.splitlines():
            log(f"        {line}")
        status = subprocess.run(
            [*cli, "status", "--queue", "celery"], capture_output=True, text=True, env=self.env
        )
        log("      `kombu-alkstore status --queue celery`:")
        for line in status.stdout.splitlines():
            log(f"        {line}")
        return 0

    def run(self) -> int:
        code = 1
        try:
            code = self.main()
        except KeyboardInterrupt:
            log("interrupted")
        except Exception as exc:
            log(f"FAILED: {exc!r}")
            self.show_logs()
        finally:
            self.stop_all()
            shutil.rmtree(self.tmp, ignore_errors=True)
        if code == 0:
            log("all tasks completed; worker and beat stopped.")
        return code


if __name__ == "__main__":
    sys.exit(Runner().run())
