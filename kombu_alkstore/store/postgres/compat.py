"""psycopg 3.2 and 3.3, one API (the PostgreSQL engine's own, so no module outside the
engine imports psycopg; it was ``kombu_alkstore.compat.psycopg``).

- ``PGconn.send_query_prepared`` in psycopg-binary 3.2 accepts its parameter values and
  formats as lists only (``TypeError: Expected list, got tuple``; 3.3 takes any
  sequence), and ``Transformer.dump_sequence`` returns a tuple in some releases:
  :func:`send_query_prepared` passes lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import pq


def send_query_prepared(
    pgconn: pq.abc.PGconn,
    name: bytes,
    values: Sequence[Any],
    formats: Sequence[int] | None,
) -> None:
    """Send the prepared statement ``name`` with ``values`` (already dumped) in
    ``formats``, on every supported psycopg (both arguments go as lists)."""
    pgconn.send_query_prepared(
        name,
        values if isinstance(values, list) else list(values),
        formats if formats is None or isinstance(formats, list) else list(formats),
    )
