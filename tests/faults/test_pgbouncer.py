"""Through a real PgBouncer in transaction mode (the distribution's package, started here
on a private port in front of the test database): every statement but ``LISTEN`` goes
through it (``transaction_pooler=True``: no server-side prepared statements), the
``LISTEN`` connection goes direct (``listen_url``). A worker, a beat, the hand-off and a
publisher; then PgBouncer killed with -9 and restarted mid-stream: nothing confirmed is
lost.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import psycopg
import pytest

from tests.beat.beat_helpers import APP as BEAT_APP
from tests.beat.beat_helpers import beat_process, every, runs
from tests.conftest import PG_URL, Target
from tests.helpers import make_app, read_record, wait_for, worker_process
from tests.private_pg import _as_postgres, _free_port

TASKS = 300


class PgBouncer:
    """A ``pgbouncer`` process in transaction mode in front of the test database."""

    def __init__(self) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(binary):  # fail, never skip
            pytest.fail("pgbouncer is required (the Debian package, installed by .ci/run)")
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="alkstore-pgb-")
        self.port = _free_port()
        real = psycopg.conninfo.conninfo_to_dict(PG_URL)
        with open(os.path.join(self.dir, "users.txt"), "w") as f:
            f.write('"postgres" ""\n')
        with open(os.path.join(self.dir, "pgbouncer.ini"), "w") as f:
            f.write(
                f"[databases]\n{real['dbname']} = host={real.get('host', '127.0.0.1')} "
                f"port={real.get('port', 5432)} dbname={real['dbname']}\n"
                "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
                f"listen_port = {self.port}\nauth_type = trust\n"
                f"auth_file = {self.dir}/users.txt\npool_mode = transaction\n"
                "max_client_conn = 500\ndefault_pool_size = 20\nunix_socket_dir =\n"
                f"logfile = {self.dir}/pgbouncer.log\n"
            )
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            for name in os.listdir(self.dir):
                shutil.chown(os.path.join(self.dir, name), "postgres", "postgres")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{real['dbname']}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            _as_postgres([self.binary, os.path.join(self.dir, "pgbouncer.ini")]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self._accepts(), 10, interval=0.05)

    def _accepts(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=1, prepare_threshold=None).close()
            return True
        except psycopg.OperationalError:
            return False

    def kill9(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def destroy(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pgbouncer():
    bouncer = PgBouncer()
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.destroy()


def test_worker_beat_handoff_and_a_pgbouncer_restart_through_transaction_mode(
    pgbouncer, pg_target, tmp_path
):
    pg_target.open().close()  # the tables (DDL goes direct, as a migration would)
    target = Target("postgresql", pgbouncer.url, pg_target.schema)
    opts = dict(
        target.transport_options,
        polling_interval=1.0,
        visibility_timeout=10,
        transaction_pooler=True,
        listen_url=pg_target.url,
    )
    app = make_app(target, transport_options=opts)
    env = {"ALKSTORE_TEST_OPTIONS": json.dumps(opts), "ALKSTORE_TEST_ACKS_LATE": "1"}
    record = tmp_path / "record.tsv"
    beats = tmp_path / "beat.tsv"
    beat_env = {**env, **every(1, options={"queue": "beat"})}
    confirmed: list[str] = []
    policy = {"max_retries": 60, "interval_start": 0.1, "interval_step": 0.2, "interval_max": 0.5}
    with (
        worker_process(target, record, "-c", "4", "-P", "threads", log=tmp_path / "w.log", **env),
        worker_process(target, beats, "-Q", "beat", "-n", "b@%h", app=BEAT_APP, **env),
        beat_process(target, beats, tmp_path / "beat.log", **beat_env),
    ):
        # Idle: the worker offers its slots (registered through PgBouncer, its lock held
        # on the direct LISTEN connection), so a publish is handed off.
        with psycopg.connect(pg_target.url, autocommit=True) as conn:
            sql = f'SELECT count(*) FROM "{target.schema}".offers WHERE slots > 0'
            wait_for(lambda: conn.execute(sql).fetchone()[0] > 0, 60, interval=0.1)
        app.send_task("tests.apps.proj.mark", ("first",), retry_policy=policy)
        wait_for(lambda: read_record(record), 30, interval=0.05)

        def publish() -> None:
            for i in range(TASKS):
                app.send_task("tests.apps.proj.mark", (f"p{i}",), retry_policy=policy)
                confirmed.append(f"p{i}")
                time.sleep(0.01)

        publisher = threading.Thread(target=publish)
        publisher.start()
        wait_for(lambda: len(read_record(record)) > TASKS // 3, 60, interval=0.05)
        pgbouncer.kill9()  # every client connection through it drops
        time.sleep(0.5)
        pgbouncer.start()
        restarted = time.time()
        publisher.join(120)
        wait_for(lambda: {r[0] for r in read_record(record)} >= set(confirmed), 90)
        wait_for(lambda: [b for b, _ in runs(beats) if b > restarted + 1], 30)
    ran = collections.Counter(r[0] for r in read_record(record))
    assert len(confirmed) == TASKS
    assert set(confirmed) <= set(ran)
    fired = collections.Counter(b for b, _ in runs(beats))
    assert len(fired) >= 3 and max(fired.values()) == 1
