"""An engine's table-queue statements rendered for one :class:`TableSpec`.

Each engine package keeps its statements in a ``tables.sql`` (named statements and
fragments, as :mod:`kombu_alkstore.store.sqlfile` reads them). A fragment names one
role's piece of a condition (``due_retry``: the row's retry_after has passed); this
module joins the pieces of the roles the table has into the slots the statements use
(``{due}``, ``{fence}``, ``{order}``...). Every table and column name in the SQL is
quoted by the engine's own ``quote``; values are always bound parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..store.sqlfile import parse_blocks, render
from .spec import ROLES, TableSpec

#: The fragments that are one role's piece, by the start of their names.
_PIECE_KINDS = frozenset({"due", "live", "spent", "order", "bump", "refund", "fence", "delay"})

#: A column role the table lacks renders as this: statements that use it are never run.
ABSENT = "NULL"


def render_for(
    spec: TableSpec,
    text: str,
    quote: Callable[[str], str],
    dead_columns: Sequence[str] = (),
    where: str = "tables.sql",
) -> dict[str, str]:
    """Every statement of ``text`` for ``spec``; ``dead_columns`` are the columns a row
    moved to the dead table keeps (both tables have them)."""
    statements, fragments = parse_blocks(text, where)
    names = {f"c_{role}": quote(spec.columns[role]) if spec.has(role) else ABSENT for role in ROLES}
    names["table"] = quote(spec.table)
    names["dead_table"] = quote(spec.dead.table) if spec.dead.table else ABSENT
    names["copy"] = ", ".join(quote(c) for c in dead_columns) or ABSENT
    # The pieces of one role each (the others, like ``held``, use the joined slots).
    own = {k: v for k, v in fragments.items() if k.split("_")[0] in _PIECE_KINDS}
    piece = render(own, fragments, names, where)

    def pieces(*wanted: tuple[str, bool]) -> list[str]:
        return [piece[name] for name, on in wanted if on]

    attempt = spec.has("attempt")
    names["due"] = " AND ".join(
        pieces(
            ("due_group", spec.has("group")),
            ("due_processed", spec.has("processed_at")),
            ("due_retry", spec.has("retry_after")),
            ("due_lease", True),
        )
    )
    names["live"] = piece["live_attempt"] if attempt else "TRUE"
    names["spent"] = piece["spent_attempt"] if attempt else "FALSE"
    # Due rows worth a claim: spent ones too when the claim dead-letters them elsewhere.
    names["wanted"] = names["live"] if spec.dead.kind == "stay" else "TRUE"
    names["order"] = ", ".join(
        pieces(
            ("order_priority", spec.has("priority")),
            ("order_retry", spec.has("retry_after")),
            ("order_id", True),
        )
    )
    names["bump"] = piece["bump_attempt"] if attempt else ""
    names["refund"] = piece["refund_attempt"] if attempt else ""
    names["fence"] = " AND ".join(pieces(("fence_lease", True), ("fence_attempt", attempt)))
    names["unfinished"] = piece["due_processed"] if spec.has("processed_at") else "TRUE"
    names["in_group"] = piece["due_group"] if spec.has("group") else "TRUE"
    names["delay_set"] = piece["delay_retry" if spec.has("retry_after") else "delay_lease"]
    return render(statements, fragments, names, where)
