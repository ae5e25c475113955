"""Named SQL statements kept in ``.sql`` files, loaded in one templating pass.

A file holds blocks, each opened by a comment line naming it::

    -- name: ack
    -- Any comment lines after the name document the statement.
    DELETE FROM {jobs} j USING ... WHERE {held} RETURNING j.id;

    -- fragment: held
    j.id = h.id AND j.token = h.token AND j.deadline > {now}

``-- name:`` blocks are statements; ``-- fragment:`` blocks are pieces of SQL that
statements (and other fragments) include as ``{fragment_name}``. ``{word}`` is replaced
by a table name or a fragment, once, when the file is loaded; any other brace (a
PostgreSQL array literal ``'{}'``) is SQL and left alone. Bound parameters are the
driver's own (``%(queue)s`` for psycopg, ``:queue`` for sqlite3): nothing from a caller
is ever templated into a statement.

Guarantees: an unknown ``{word}``, a duplicate name, a fragment cycle, or a required
statement missing from the file raises :class:`SQLFileError` at load time (when a store
opens), never when the statement is first run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

_BLOCK = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.M)
_SLOT = re.compile(r"\{(\w+)\}")


class SQLFileError(Exception):
    """A ``.sql`` file of named statements is malformed (a packaging defect)."""


def parse_blocks(text: str, where: str = "<sql>") -> tuple[dict[str, str], dict[str, str]]:
    """The ``(statements, fragments)`` of a file's text, untemplated."""
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    marks = list(_BLOCK.finditer(text))
    for i, mark in enumerate(marks):
        kind, name = mark.group(1), mark.group(2)
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = _strip(text[mark.end() : end])
        into = statements if kind == "name" else fragments
        if name in statements or name in fragments:
            raise SQLFileError(f"{where}: {name!r} is defined twice")
        into[name] = body
    return statements, fragments


def _strip(body: str) -> str:
    """The SQL of a block: its leading comment lines and trailing semicolon removed."""
    lines = body.strip().splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
        lines.pop()  # a comment heading the next block is not part of this one
    sql = "\n".join(lines).strip()
    return sql[:-1].rstrip() if sql.endswith(";") else sql


def render(
    statements: Mapping[str, str],
    fragments: Mapping[str, str],
    names: Mapping[str, str],
    where: str = "<sql>",
) -> dict[str, str]:
    """Every statement with its ``{word}`` slots filled by ``names`` or fragments."""
    done: dict[str, str] = {}

    def expand(sql: str, stack: tuple[str, ...]) -> str:
        def fill(match: re.Match) -> str:
            word = match.group(1)
            if word in names:
                return names[word]
            if word in fragments:
                if word in stack:
                    raise SQLFileError(f"{where}: fragment cycle {' -> '.join(stack + (word,))}")
                if word not in done:
                    done[word] = expand(fragments[word], stack + (word,))
                return done[word]
            raise SQLFileError(f"{where}: {{{word}}} is neither a table nor a fragment")

        return _SLOT.sub(fill, sql)

    return {key: expand(sql, (key,)) for key, sql in statements.items()}


def load_queries(
    package: str,
    filename: str | Sequence[str],
    names: Mapping[str, str],
    required: Iterable[str] = (),
) -> dict[str, str]:
    """The named statements of ``filename`` in ``package`` (or of several files, read as
    one: a fragment of one serves the others, a name defined in two is an error),
    templated with ``names`` (table names as written in SQL, and any constant
    fragments); every name in ``required`` must be defined."""
    files = [filename] if isinstance(filename, str) else list(filename)
    where = f"{package}/{'+'.join(files)}"
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for name in files:
        text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
        more, pieces = parse_blocks(text, f"{package}/{name}")
        for key in set(more) | set(pieces):
            if key in statements or key in fragments:
                raise SQLFileError(f"{where}: {key!r} is defined twice")
        statements.update(more)
        fragments.update(pieces)
    missing = sorted(set(required) - set(statements))
    if missing:
        raise SQLFileError(f"{where}: required statements missing: {', '.join(missing)}")
    return render(statements, fragments, names, where)
