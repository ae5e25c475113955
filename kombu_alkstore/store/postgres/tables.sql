-- Table queues (kombu_alkstore/tables/, docs/tables.md): a table of the service's own
-- read as a Celery queue. {table}, {dead_table}, {copy} and {c_<role>} are the configured
-- names, quoted as identifiers; {due}, {live}, {fence}... join the fragments below of the
-- roles the table has (tables/render.py). Values are psycopg's %(name)s parameters.

-- fragment: now
statement_timestamp()

-- fragment: due_group
t.{c_group} = %(group)s

-- fragment: due_processed
t.{c_processed_at} IS NULL

-- fragment: due_retry
(t.{c_retry_after} IS NULL OR t.{c_retry_after} <= {now})

-- fragment: due_lease
(t.{c_locked_until} IS NULL OR t.{c_locked_until} <= {now})

-- fragment: live_attempt
COALESCE(t.{c_attempt}, 0) < %(max_attempts)s

-- fragment: spent_attempt
COALESCE(t.{c_attempt}, 0) >= %(max_attempts)s

-- fragment: order_priority
t.{c_priority} ASC NULLS FIRST

-- fragment: order_retry
t.{c_retry_after} ASC NULLS FIRST

-- fragment: order_id
t.{c_id}

-- fragment: bump_attempt
, {c_attempt} = COALESCE(t.{c_attempt}, 0) + 1

-- fragment: refund_attempt
, {c_attempt} = GREATEST(COALESCE(t.{c_attempt}, 0) - 1, 0)

-- fragment: fence_lease
t.{c_locked_until} > {now}

-- fragment: fence_attempt
t.{c_attempt} = %(fence)s

-- fragment: delay_retry
{c_retry_after} = {now} + make_interval(secs => %(delay)s), {c_locked_until} = NULL

-- fragment: delay_lease
{c_locked_until} = {now} + make_interval(secs => %(delay)s)

-- fragment: held
t.{c_id} = %(id)s AND {fence}

-- name: claim
-- Due rows in claim order (priority, retry_after, id), leased for the visibility timeout,
-- one attempt counted; rows another claim holds locked are skipped.
WITH picked AS (
  SELECT t.{c_id} AS alk_id FROM {table} t
  WHERE {due} AND {live}
  ORDER BY {order}
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
)
UPDATE {table} t SET {c_locked_until} = {now} + make_interval(secs => %(vt)s){bump}
FROM picked WHERE t.{c_id} = picked.alk_id
RETURNING t.*, extract(epoch FROM {now})::float8 + %(vt)s AS alk_deadline

-- name: spent
-- Due rows whose attempts are spent (a lapsed lease of their last attempt): to dead-letter.
SELECT t.{c_id} AS alk_id FROM {table} t
WHERE {due} AND {spent}
ORDER BY {order}
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: finish_mark
UPDATE {table} t SET {c_processed_at} = {now}, {c_locked_until} = NULL
WHERE {held} RETURNING t.{c_id} AS alk_id

-- name: finish_delete
DELETE FROM {table} t WHERE {held} RETURNING t.{c_id} AS alk_id

-- name: extend
UPDATE {table} t SET {c_locked_until} = {now} + make_interval(secs => %(vt)s)
WHERE {held} RETURNING t.{c_id} AS alk_id

-- name: release
UPDATE {table} t SET {c_locked_until} = NULL{refund}
WHERE {held} RETURNING t.{c_id} AS alk_id

-- name: delay
-- A failed attempt; the store's channel hears when the row falls due (at commit), so an
-- idle worker claims it then, as it does a job's retry.
UPDATE {table} t SET {delay_set}
WHERE {held}
RETURNING t.{c_id} AS alk_id, pg_notify(%(channel)s, json_build_array(
  extract(epoch FROM {now})::float8 + %(delay)s, %(queue)s::text)::text) IS NULL AS alk_noted

-- name: bury_stay
-- Attempts spent, no dead letter configured: the row stays, its lease dropped; the
-- claim's {live} condition passes it over from now on.
UPDATE {table} t SET {c_locked_until} = NULL
WHERE {held} RETURNING t.{c_id} AS alk_id

-- name: bury_group
UPDATE {table} t SET {c_group} = %(dead_group)s, {c_locked_until} = NULL
WHERE t.{c_id} = %(id)s RETURNING t.{c_id} AS alk_id

-- name: bury_copy
INSERT INTO {dead_table} ({copy}) SELECT {copy} FROM {table} t WHERE t.{c_id} = %(id)s

-- name: bury_delete
DELETE FROM {table} t WHERE t.{c_id} = %(id)s RETURNING t.{c_id} AS alk_id

-- name: has_due
-- A row to claim, or a spent one to dead-letter (not one left in place).
SELECT EXISTS (SELECT 1 FROM {table} t WHERE {due} AND {wanted}) AS due

-- name: next_due
SELECT extract(epoch FROM min(t.{c_retry_after}))::float8 AS at FROM {table} t
WHERE {in_group} AND {unfinished} AND {live} AND t.{c_retry_after} > {now}

-- name: counts
SELECT
  count(*) FILTER (WHERE {due} AND {live}) AS pending,
  count(*) FILTER (WHERE {in_group} AND {unfinished}
                   AND t.{c_locked_until} > {now}) AS processing,
  count(*) FILTER (WHERE {in_group} AND {unfinished} AND {spent}
                   AND (t.{c_locked_until} IS NULL OR t.{c_locked_until} <= {now})) AS spent
FROM {table} t

-- name: delayed
SELECT count(*) AS n FROM {table} t
WHERE {in_group} AND {unfinished} AND {live} AND t.{c_retry_after} > {now}
  AND (t.{c_locked_until} IS NULL OR t.{c_locked_until} <= {now})

-- name: dead_group_count
SELECT count(*) AS n FROM {table} t WHERE t.{c_group} = %(dead_group)s

-- name: dead_table_count
SELECT count(*) AS n FROM {dead_table}

-- name: columns
-- The table's columns (to check the mapping against); no row when it does not exist.
SELECT a.attname AS name FROM pg_attribute a
WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
