"""Versioned migrations per engine: numbered ``.sql`` files applied in order.

Each engine keeps its migrations in ``store/<engine>/migrations/NNNN_<what>.sql``, one
file per schema version (``0001_initial.sql`` is version 1). A file holds ``-- name:``
blocks (see :mod:`.sqlfile`), one statement each, run in file order; ``{jobs}``-style
slots are table names, plus ``{schema}`` (PostgreSQL: the quoted schema), ``{prefix}``
(SQLite: the table prefix, for index names) and ``{waiters}`` (the retired version-2
table), filled in one templating pass when the files are loaded.

An engine's setup, under the lock it already takes (PostgreSQL: the advisory lock in a
transaction; SQLite: ``BEGIN IMMEDIATE``), reads the stored version and calls
:meth:`Migrations.apply` with its own execute function: every migration after the stored
version runs, each followed by the ``meta`` row recording it, all in that transaction.

Rules for a new migration: add the next number (never edit a released file); write it
idempotent where the engine allows (PostgreSQL: ``IF NOT EXISTS`` everywhere, including
``ADD COLUMN``), because the concatenation of all files is also the PostgreSQL script
``kombu-alkstore setup --print`` emits (:func:`.schema.ddl_statements`). SQLite's
``ADD COLUMN`` has no ``IF NOT EXISTS``; a migration only runs on tables stored below its
version, so that is safe at runtime, and the printed SQLite script is the final layout
instead (see :mod:`.schema`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from .engines import engines
from .sqlfile import SQLFileError, parse_blocks, render

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: Each engine's migrations package, by engine name (``Store.engine``), as each engine
#: package describes itself (:attr:`.engines.Engine.migrations`).
ENGINE_PACKAGES = {engine.name: engine.migrations for engine in engines()}

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
# ``ALTER TABLE {table} ADD COLUMN [IF NOT EXISTS] column``, as written in a migration.
_ADD_COLUMN = re.compile(
    r"^ALTER\s+TABLE\s+\{(\w+)\}\s+ADD\s+COLUMN\s+(IF\s+NOT\s+EXISTS\s+)?\"?(\w+)\"?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Migration:
    """One migration file, rendered: the statements bringing the tables from
    ``version - 1`` to ``version``, and ``record``, the ``meta`` write that stores it."""

    version: int
    name: str
    statements: tuple[str, ...]
    record: str
    #: ``(statement index, table, column)`` of each ``ALTER TABLE … ADD COLUMN``.
    added_columns: tuple[tuple[int, str, str], ...] = ()
    #: The indexes of the ``ADD COLUMN`` statements without ``IF NOT EXISTS``.
    unguarded: frozenset[int] = frozenset()


def _directory(package: str) -> Traversable:
    """The package's directory, found from the top-level package (importing none of the
    intermediate packages, so an engine package need not be importable to list it)."""
    top, *rest = package.split(".")
    where = resources.files(top)
    for part in rest:
        where = where / part
    return where


def _files(package: str) -> list[tuple[int, str, Traversable]]:
    """``(version, name, file)`` of every migration in ``package``, in order; checks that
    they are numbered 1, 2, 3… without gaps or duplicates."""
    found = []
    directory = _directory(package)
    for entry in directory.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry))
        elif entry.name.endswith(".sql"):
            raise SQLFileError(f"{package}/{entry.name}: not named NNNN_<what>.sql")
    found.sort(key=lambda f: f[0])
    numbers = [version for version, _, _ in found]
    if numbers != list(range(1, len(found) + 1)):
        raise SQLFileError(f"{package}: migrations must be numbered 1, 2, 3…; found {numbers}")
    return found


def latest(package: str) -> int:
    """The newest version ``package``'s migrations reach."""
    return len(_files(package))


#: The newest schema version of each engine (the number of its migration files).
LATEST: dict[str, int] = {engine: latest(pkg) for engine, pkg in ENGINE_PACKAGES.items()}


def _runner_statements() -> dict[str, str]:
    text = resources.files(__package__).joinpath("migrate.sql").read_text(encoding="utf-8")
    statements, fragments = parse_blocks(text, f"{__package__}/migrate.sql")
    if fragments:
        raise SQLFileError(f"{__package__}/migrate.sql: no fragments expected")
    return statements


class Migrations:
    """An engine's migrations, rendered for one set of table names.

    ``names`` must give every slot the files use: the table names (``Store.names``),
    ``waiters``, and ``schema`` / ``prefix`` (see :func:`.schema.migration_names`).
    """

    def __init__(self, package: str, names: Mapping[str, str]) -> None:
        self.package = package
        self.names = dict(names)
        self._runner = _runner_statements()
        loaded = []
        for version, name, entry in _files(package):
            where = f"{package}/{entry.name}"
            raw, fragments = parse_blocks(entry.read_text(encoding="utf-8"), where)
            if not raw:
                raise SQLFileError(f"{where}: no statements")
            rendered = render(raw, fragments, self.names, where)
            adds = [(i, _ADD_COLUMN.match(sql)) for i, sql in enumerate(raw.values())]
            adds = [(i, m) for i, m in adds if m]
            loaded.append(
                Migration(
                    version,
                    name,
                    tuple(rendered.values()),
                    self.record(version),
                    tuple((i, m.group(1), m.group(3)) for i, m in adds),
                    frozenset(i for i, m in adds if not m.group(2)),
                )
            )
        self.migrations: tuple[Migration, ...] = tuple(loaded)

    @property
    def latest(self) -> int:
        return len(self.migrations)

    def runner_statement(self, key: str, **slots: str) -> str:
        """A statement of ``store/migrate.sql`` rendered with these names and ``slots``."""
        return render({key: self._runner[key]}, {}, {**self.names, **slots}, "migrate.sql")[key]

    def record(self, version: int, complete: str | None = None) -> str:
        """The statement storing ``version`` as the schema version (never lowering it);
        with ``complete``, only where that condition holds."""
        if complete is None:
            return self.runner_statement("record", version=str(int(version)))
        return self.runner_statement(
            "record_if_complete", version=str(int(version)), complete=complete
        )

    def column_exists(self, table: str, column: str) -> str:
        """SQLite: a condition true when the stored table ``table`` has ``column``."""
        return self.runner_statement("column_exists", table=table, column=column)

    def pending(self, stored: int | None) -> list[Migration]:
        """The migrations to apply, in order, to tables stored at ``stored`` (None: no
        tables yet); none when they are at the latest version or newer."""
        return [m for m in self.migrations if m.version > (stored or 0)]

    def apply(self, execute: Callable[[str], Any], stored: int | None) -> list[int]:
        """Run every pending migration through ``execute`` (one statement per call,
        returning a DB-API cursor: ``connection.execute`` of psycopg or sqlite3), each
        followed by its ``record``; returns the versions applied. The caller holds its
        setup lock and transaction, and read ``stored`` under them."""
        applied = []
        for migration in self.pending(stored):
            adds = {i: (table, column) for i, table, column in migration.added_columns}
            for i, statement in enumerate(migration.statements):
                if i in migration.unguarded and adds[i][1] in self._columns(execute, adds[i][0]):
                    continue  # SQLite: the column is there already (see ``columns``)
                execute(statement)
            execute(migration.record)
            applied.append(migration.version)
        return applied

    def _columns(self, execute: Callable[[str], Any], table: str) -> set[str]:
        """The columns ``table`` has now, from a query returning no rows."""
        cursor = execute(self.runner_statement("columns", table=self.names[table]))
        return {d[0] for d in cursor.description or ()}
