"""A private, throwaway PostgreSQL cluster (initdb on a free port), never the shared one."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL server binary {name!r} not found")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PrivateCluster:
    def __init__(self, standby_of: PrivateCluster | None = None, *settings: str) -> None:
        """A new cluster (``initdb``), or with ``standby_of`` a streaming standby of that
        running primary (``pg_basebackup -R``). ``settings`` are ``name=value`` server
        settings for every start."""
        self.dir = tempfile.mkdtemp(prefix="alkstore-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.settings = list(settings)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        if standby_of is None:
            command = [_bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres"]
        else:
            command = [
                _bin("pg_basebackup"),
                "-D",
                self.data,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-h",
                "127.0.0.1",
                "-p",
                str(standby_of.port),
                "-U",
                "postgres",
            ]
        subprocess.run(_as_postgres(command), check=True, capture_output=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        opts += "".join(f" -c {s}" for s in self.settings)
        subprocess.run(
            _as_postgres(
                [
                    _bin("pg_ctl"),
                    "-D",
                    self.data,
                    "-o",
                    opts,
                    "-l",
                    self.data + "/log",
                    "-w",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", self.data, "-m", mode, "-w", "stop"]),
            capture_output=True,
        )

    def promote(self) -> None:
        """A standby becomes a primary (and accepts writes) once this returns."""
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", self.data, "-w", "promote"]),
            check=True,
            capture_output=True,
        )

    def kill9(self) -> None:
        """SIGKILL the postmaster and every backend: a crash, no shutdown checkpoint."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True
        ).stdout.split()
        for pid in [postmaster, *map(int, children)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def terminate_backends(self) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone()[0]

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
