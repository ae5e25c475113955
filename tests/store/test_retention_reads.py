"""Maintenance's dead-letter retention (every round, once any retention is set) reads
only the letters older than the shortest retention, through dead_died: with the queue's
own cutoff alone, a value per letter, it read every dead letter each round.

A real PostgreSQL, its own schema; counted, not timed: the blocks the store's own
``retention`` statement reads from the dead letters and their indexes (this
transaction's statistics, rolled back), with 200 and with 20,000 young letters (13
and 11; 13 and 256 with the queue's cutoff alone).
"""

from __future__ import annotations

import time

import psycopg

from tests.helpers import blocks_read


def dead_blocks(conn: psycopg.Connection, store, schema: str) -> int:
    return blocks_read(
        conn,
        f'"{schema}".dead',
        store._sql["retention"],
        store._maintenance_params("retention"),
    )


def bury(conn: psycopg.Connection, schema: str, start: int, count: int) -> None:
    """``count`` dead letters of queue q, died a minute ago."""
    conn.execute(
        f'INSERT INTO "{schema}".dead (id, queue, body, priority, attempts, max_attempts, '
        "visibility_timeout, backoff_base, created_at, died_at, last_error) "
        "SELECT g, 'q', '\\x00', 0, 3, 3, 30, 1, %(t)s, %(t)s, 'x' "
        "FROM generate_series(%(a)s::bigint, %(b)s::bigint) g",
        {"t": time.time() - 60, "a": start, "b": start + count - 1},
    )
    conn.commit()


def test_the_retention_round_reads_as_much_with_20000_young_letters_as_with_200(pg_target):
    schema = pg_target.schema
    with (
        pg_target.open(dead_letter_retention=86400.0) as store,
        psycopg.connect(pg_target.url) as conn,
    ):
        bury(conn, schema, 1, 200)
        conn.execute(f'ANALYZE "{schema}".dead')
        conn.commit()
        few = dead_blocks(conn, store, schema)
        bury(conn, schema, 201, 19_800)
        many = dead_blocks(conn, store, schema)
        assert many <= few + 3, (few, many)
        assert store.maintain("retention").count == 0
