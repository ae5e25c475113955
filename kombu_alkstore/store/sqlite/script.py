"""The SQLite setup script (``kombu-alkstore setup --print``): the migrations' final
layout, since SQLite's ``ADD COLUMN`` cannot be made idempotent.

Each table and index is printed as ``CREATE … IF NOT EXISTS``, read back from an
in-memory database the migrations were run on; the migrations' other statements follow
as written (``DROP … IF EXISTS``, ``INSERT … ON CONFLICT DO NOTHING``, ``CREATE TRIGGER
IF NOT EXISTS``: they must be
idempotent and valid on the final layout; a future SQLite table rebuild,
``CREATE``/copy/``DROP``/``RENAME``, would need this revisited), then the version,
stamped only where every added column exists, so a file the script could not upgrade
keeps its version and ``setup=False`` still refuses it until ``kombu-alkstore setup``
ran. With ``existing`` (stored table name -> its columns, read by the caller under its
write lock), the columns those tables lack are added too and the version is stamped.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..migrate import Migrations

_CREATE = re.compile(r"^CREATE (TABLE|INDEX|UNIQUE INDEX) ", re.IGNORECASE)
# The layout read back (tables, indexes); a CREATE TRIGGER (the acts table's refusals,
# migration 0008) is printed as written, with the other idempotent statements.
_LAYOUT = re.compile(r"^\s*(CREATE\s+(TABLE|INDEX|UNIQUE\s+INDEX)|ALTER)\b", re.IGNORECASE)


def _layout(found: Migrations) -> tuple[list[str], list[str]]:
    """``(tables, indexes)``: the final layout as ``CREATE … IF NOT EXISTS`` statements."""
    db = sqlite3.connect(":memory:")
    try:
        for m in found.migrations:
            for stmt in m.statements:
                db.execute(stmt)
        layout = db.execute(found.runner_statement("sqlite_layout")).fetchall()
    finally:
        db.close()
    tables = [
        _CREATE.sub(r"CREATE \1 IF NOT EXISTS ", sql, count=1) for t, sql in layout if t == "table"
    ]
    indexes = [
        _CREATE.sub(r"CREATE \1 IF NOT EXISTS ", sql, count=1) for t, sql in layout if t == "index"
    ]
    return tables, indexes


def _on_added_column(index: str, added: list[tuple[str, str, str]]) -> bool:
    """Whether the ``CREATE INDEX`` statement ``index`` names a column that a migration
    added to its table with ``ADD COLUMN``."""
    return any(
        f' ON "{table}" ' in index and re.search(rf"\b{re.escape(column)}\b", index)
        for _, table, column in added
    )


def script(
    found: Migrations, existing: dict[str, set[str]] | None, stored_name: Callable[[str], str]
) -> list[str]:
    """The setup script as statements (see the module docstring); ``stored_name(key)``
    is a table's name as stored (``alkstore_jobs``)."""
    tables, indexes = _layout(found)
    added = [
        (m.statements[i], stored_name(table), column)
        for m in found.migrations
        for i, table, column in m.added_columns
    ]
    # DROP … IF EXISTS, INSERT … ON CONFLICT DO NOTHING: as written, in order.
    rest = [stmt for m in found.migrations for stmt in m.statements if not _LAYOUT.match(stmt)]
    if existing is None:
        complete = " AND ".join(found.column_exists(t, c) for _, t, c in added) or "1"
        # An index on an added column (jobs_unique on jobs.unique_key) cannot be created
        # on a file whose table lacks it: last, before the version, so that on such a file
        # everything else is applied, the version stays, and the script stops there
        # ("no such column"), where `kombu-alkstore setup` is what upgrades it.
        late = [i for i in indexes if _on_added_column(i, added)]
        early = [i for i in indexes if i not in late]
        return [*tables, *early, *rest, *late, found.record(found.latest, complete)]
    # A table not there before was just created with every column: it is left out.
    alters = [stmt for stmt, t, c in added if t in existing and c not in existing[t]]
    return [*tables, *alters, *indexes, *rest, found.record(found.latest)]
