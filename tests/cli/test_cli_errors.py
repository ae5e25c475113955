"""CLI error paths: one clear line on stderr, exit status 1, never a traceback."""

from __future__ import annotations

import io
import uuid

import pytest

from kombu_alkstore.cli import main, store_url
from tests.cli.conftest import run_cli, run_module


def one_line_error(r, *needles: str) -> None:
    assert r.code == 1, (r.out, r.err)
    assert "Traceback" not in r.err
    assert r.err.count("\n") == 1 and r.err.startswith("kombu-alkstore: error: "), r.err
    for needle in needles:
        assert needle in r.err, r.err


COMMANDS = [
    ["status"],
    ["dead", "list"],
    ["dead", "show", "1"],
    ["dead", "requeue", "--all"],
    ["dead", "purge", "--all"],
    ["setup"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: "-".join(a))
def test_unreachable_postgres(target, argv):
    r = run_cli(target, *argv, broker="alkstore+postgresql://postgres@127.0.0.1:1/x")
    one_line_error(r, "cannot connect to PostgreSQL", "127.0.0.1:1")


@pytest.mark.parametrize("argv", COMMANDS[:-1], ids=lambda a: "-".join(a))
def test_missing_tables_in_a_fresh_schema(target, argv):
    if target.engine == "sqlite":
        # The file exists (another schema was set up in it); this schema's tables do not.
        assert run_cli(target, "--schema", "other", "setup").code == 0
    r = run_cli(target, *argv)
    if target.engine == "sqlite":
        one_line_error(r, "tables are missing", target.schema, "kombu-alkstore setup")
    else:
        one_line_error(r, "tables are missing", target.schema, "kombu-alkstore setup")


def test_missing_sqlite_file_is_not_created(tmp_path):
    path = tmp_path / "typo.db"
    out, err = io.StringIO(), io.StringIO()
    code = main(["-b", f"alkstore+sqlite:///{path}", "status"], out=out, err=err)
    assert code == 1 and "does not exist" in err.getvalue()
    assert not path.exists()


@pytest.mark.parametrize(
    "url, needle",
    [
        ("not a url", "bad broker URL"),
        ("redis://localhost:6379/0", "unsupported scheme 'redis'"),
        ("amqp://guest@localhost//", "unsupported scheme 'amqp'"),
        ("sqla+sqlite:///x.db", "'sqla' transport, not alkstore"),
        ("alkstore+mysql://u@h/db", "unsupported scheme 'mysql'"),
        ("alkstore+sqlite://", "SQLite needs a file"),
        ("alkstore+postgresql://u@h:notaport/db", "bad database URL"),
    ],
)
def test_bad_urls(url, needle):
    out, err = io.StringIO(), io.StringIO()
    code = main(["-b", url, "status"], out=out, err=err)
    one_line_error(type("R", (), {"code": code, "err": err.getvalue(), "out": ""}), needle)


def test_password_is_masked_in_errors():
    out, err = io.StringIO(), io.StringIO()
    code = main(["-b", "alkstore+postgresql://u:s3cret@127.0.0.1:1/db", "status"], out=out, err=err)
    assert code == 1 and "s3cret" not in err.getvalue()
    code = main(["-b", "sqla+postgresql://u:s3cret@h/db", "status"], out=out, err=err)
    assert code == 1 and "s3cret" not in err.getvalue()


def test_no_broker_url(monkeypatch):
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert main(["status"], out=out, err=err) == 1
    assert "CELERY_BROKER_URL" in err.getvalue()


def test_broker_url_from_environment(target, monkeypatch):
    monkeypatch.setenv("CELERY_BROKER_URL", target.broker_url)
    monkeypatch.setenv("ALKSTORE_SCHEMA", target.schema)
    out, err = io.StringIO(), io.StringIO()
    assert main(["setup"], out=out, err=err) == 0, err.getvalue()
    assert main(["status"], out=out, err=err) == 0
    assert target.schema in out.getvalue()


def test_options_after_the_command(target):
    out, err = io.StringIO(), io.StringIO()
    argv = ["setup", "-b", target.broker_url, "--schema", target.schema]
    assert main(argv, out=out, err=err) == 0, err.getvalue()
    assert main(["status", "--schema", target.schema, "-b", target.url], out=out, err=err) == 0


def test_bad_schema_name(target):
    r = run_cli(target, "--schema", 'x"; DROP TABLE y; --', "status")
    one_line_error(r, "not a valid identifier")


def test_usage_errors_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert main(["dead"]) == 2
    assert main(["dead", "list", "--limit", "many"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_store_url_prefixes():
    assert store_url("alkstore+postgresql://u@h/db") == "postgresql://u@h/db"
    assert store_url("alkstore+sqlite:///x.db") == "sqlite:///x.db"
    assert store_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url(" sqlite:///x.db ") == "sqlite:///x.db"


# --------------------------------------------------------------- as a subprocess
def test_module_errors_have_no_traceback(target):
    r = run_module("-b", "alkstore+postgresql://postgres@127.0.0.1:1/x", "status")
    one_line_error(r, "cannot connect")
    r = run_module(
        "-b", target.broker_url, "--schema", f"fresh_{uuid.uuid4().hex[:8]}", "dead", "list"
    )
    one_line_error(r)
    r = run_module("-b", "bogus", "status")
    one_line_error(r, "bad broker URL")
