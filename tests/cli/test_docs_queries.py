"""The SQL in docs/operations.md runs against both engines' real tables."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def blocks(engine: str) -> list[str]:
    found = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    return [b for b in found if b.startswith(f"-- engine: {engine}\n")]


def statements(block: str) -> list[str]:
    return [s.strip() for s in block.split(";") if s.strip() and not _only_comments(s)]


def _only_comments(text: str) -> bool:
    return all(not ln.strip() or ln.strip().startswith("--") for ln in text.splitlines())


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_every_query_runs(engine, request, tmp_path):
    assert blocks(engine), f"no {engine} queries found in {DOC}"
    target = request.getfixturevalue("pg_target" if engine == "postgresql" else "sqlite_target")
    store = target.open()
    try:
        store.enqueue("celery", b"x")
        store.enqueue("celery", b"y", delay=60)
        store.fail(store.claim(["celery"]), "boom")
        store.enqueue("celery", b"z")
        store.claim(["celery"])
    finally:
        store.close()
    for block in blocks(engine):
        sql = block.replace("alkstore.", f"{target.schema}.").replace(
            "alkstore_", f"{target.schema}_"
        )
        sql = sql.replace("schemaname = 'alkstore'", f"schemaname = '{target.schema}'")
        for stmt in statements(sql):
            if engine == "postgresql":
                with psycopg.connect(target.url, autocommit=True) as conn:
                    conn.execute("BEGIN")
                    conn.execute(stmt)
                    conn.execute("ROLLBACK")  # the UPDATE example changes nothing
            else:
                conn = sqlite3.connect(target.url.removeprefix("sqlite:///"))
                try:
                    conn.execute(stmt).fetchall()
                    conn.rollback()
                finally:
                    conn.close()
