"""The brokers under test: how to give each run a private, throwaway place, and clean it up.

Every session gets a fresh place: a PostgreSQL schema (alkstore), a database (kombu's
``sqla`` and ``pgmq``, whose table and schema names are fixed), a RabbitMQ virtual host, a
SQLite file, or Redis database 15 (flushed before and after).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg
from sqlalchemy.engine import make_url

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("ALKSTORE_BENCH_REDIS", "redis://127.0.0.1:6379/15")
RABBIT_URL = os.environ.get("ALKSTORE_BENCH_AMQP", "pyamqp://guest:guest@127.0.0.1:5672")

#: Every broker the harness knows, in the order one repetition runs them.
ALL_BROKERS = [
    "alkstore-postgresql",
    "alkstore-postgresql-pipelined",
    "alkstore-postgresql-nosync",
    "alkstore-sqlite",
    "redis",
    "rabbitmq",
    "sqla-postgresql",
    "sqla-sqlite",
    "pgmq",
    "celery-memory",
]
QUICK_BROKERS = ["alkstore-sqlite", "alkstore-postgresql"]
#: The libpq setting the "-nosync" variant's publishing client connects with.
NOSYNC_URL_OPTION = "options=" + quote("-csynchronous_commit=off", safe="")
#: alkstore-postgresql variants that only publish (no worker): their client's options.
PIPELINED_OPTIONS = {"confirm_publish": False}
#: Celery and kombu publishing to kombu's in-process ``memory://`` transport: no broker,
#: no round trip. Its rate is Celery's own ceiling (publish only; see report.py).
CELERY_ALONE = "celery-memory"


def publish_only(broker: str) -> bool:
    """A broker measured on publish alone (the -nosync and -pipelined publishers, and
    Celery on ``memory://``)."""
    name = base_name(broker)
    return name == CELERY_ALONE or name.endswith(("-nosync", "-pipelined"))


@dataclass
class Place:
    """Where one session runs: the URLs, transport options and how to clean up."""

    broker: str
    worker_url: str
    client_url: str
    options: dict = field(default_factory=dict)
    client_options: dict | None = None
    schema: str | None = None  # alkstore on PostgreSQL: the private schema
    database: str | None = None  # a private PostgreSQL database (sqla, pgmq)
    #: Only these phases make sense (the publish-only variants: see publish_only).
    phases: frozenset[str] = frozenset({"publish", "drain", "latency", "idle"})
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def cleanup(self) -> list[str]:
        """Run every cleanup (last first); return what failed, never raise."""
        errors = []
        while self.cleanups:
            fn = self.cleanups.pop()
            try:
                fn()
            except Exception as exc:
                errors.append(f"cleanup failed: {type(exc).__name__}: {exc}")
        return errors


def base_name(broker: str) -> str:
    """``alkstore-postgresql@REV`` → ``alkstore-postgresql``."""
    return broker.split("@", 1)[0]


def pg_url_for(database: str | None = None, driver: str | None = None) -> str:
    url = make_url(PG_URL)
    if database:
        url = url.set(database=database)
    if driver:
        url = url.set(drivername=driver)
    return url.render_as_string(hide_password=False)


def pg_admin(sql: str, params: tuple = ()) -> None:
    """One statement on its own connection; a full server (other clients) is waited out."""
    for attempt in range(5):
        try:
            with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SET lock_timeout = '20s'")
                conn.execute(sql, params)
                return
        except psycopg.OperationalError as exc:
            if "too many clients" not in str(exc) or attempt == 4:
                raise
            time.sleep(2.0 * (attempt + 1))


def drop_schema(schema: str) -> None:
    pg_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def drop_database(database: str) -> None:
    pg_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _rabbitmqctl(*args: str) -> None:
    if shutil.which("rabbitmqctl") is None:
        raise RuntimeError("rabbitmqctl is not installed (needed for a private vhost)")
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def make_place(broker: str, workdir: Path, nosync_options: dict | None = None) -> Place:
    """A fresh, private place for ``broker``; its cleanups are registered as they are made."""
    tag = uuid.uuid4().hex[:10]
    name = base_name(broker)
    if name.startswith("alkstore-postgresql"):
        schema = f"bench_{tag}"
        url = "alkstore+" + PG_URL
        place = Place(broker, url, url, {"schema": schema}, schema=schema)
        place.cleanups.append(lambda: drop_schema(schema))
        if publish_only(name):
            place.phases = frozenset({"publish"})
        if name.endswith("-pipelined"):  # durable commits, confirmed after return
            place.client_options = {"schema": schema, **PIPELINED_OPTIONS}
        elif name.endswith("-nosync"):
            if nosync_options:  # the store's own knob, when it has one
                place.client_options = {"schema": schema, **nosync_options}
            else:  # what a user can do today: the publisher's libpq options
                sep = "&" if "?" in url else "?"
                place.client_url = url + sep + NOSYNC_URL_OPTION
        return place
    if name == CELERY_ALONE:
        return Place(broker, "memory://", "memory://", phases=frozenset({"publish"}))
    if name in ("alkstore-sqlite", "sqla-sqlite"):
        prefix = name.split("-", 1)[0]
        path = workdir / f"{prefix}-{tag}.db"
        url = f"{prefix}+sqlite:///{path}"
        place = Place(broker, url, url)
        place.cleanups.append(lambda: _remove_sqlite(path))
        return place
    if name == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        client.flushdb()
        place = Place(broker, REDIS_URL, REDIS_URL)
        place.cleanups.append(lambda: (client.flushdb(), client.close()))
        return place
    if name == "rabbitmq":
        vhost = f"bench_{tag}"
        _rabbitmqctl("add_vhost", vhost)
        place = Place(broker, f"{RABBIT_URL}/{vhost}", f"{RABBIT_URL}/{vhost}")
        place.cleanups.append(lambda: _rabbitmqctl("delete_vhost", vhost))
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        return place
    if name in ("sqla-postgresql", "pgmq"):
        database = f"bench_{tag}"
        if name == "pgmq":
            try:
                from pgmq.install import install_pgmq_from_sql
            except ImportError as exc:
                raise RuntimeError(
                    f"the pgmq client is not installed (pip install pgmq): {exc}"
                ) from None
        if name == "sqla-postgresql":
            url = "sqla+" + pg_url_for(database, "postgresql+psycopg")
            place = Place(broker, url, url, database=database)
        else:
            url = pg_url_for(database, "pgmq")
            place = Place(broker, url, url, {"init_extension": False}, database=database)
        pg_admin(f'CREATE DATABASE "{database}"')
        place.cleanups.append(lambda: drop_database(database))
        if name == "pgmq":
            try:
                # The SQL-only install the pgmq client ships (no extension on this server).
                install_pgmq_from_sql(dsn=pg_url_for(database))
            except Exception:
                place.cleanup()
                raise
        return place
    raise ValueError(f"unknown broker {broker!r}")
