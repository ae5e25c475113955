-- Table queues (kombu_alkstore/tables/, docs/tables.md): a table of the service's own
-- read as a Celery queue. {table}, {dead_table}, {copy} and {c_<role>} are the configured
-- names, quoted as identifiers; {due}, {live}, {fence}... join the fragments below of the
-- roles the table has (tables/render.py). Values are sqlite3's :name parameters.
-- Times are text (any form julianday() reads), compared through julianday(); the ones
-- written here are UTC 'YYYY-MM-DD HH:MM:SS.SSS' (datetime('now') order).

-- fragment: now
julianday('now')

-- fragment: stamp
strftime('%Y-%m-%d %H:%M:%f', 'now')

-- fragment: stamp_vt
strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :vt || ' seconds')

-- fragment: stamp_delay
strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay || ' seconds')

-- fragment: due_group
t.{c_group} = :group

-- fragment: due_processed
t.{c_processed_at} IS NULL

-- fragment: due_retry
(t.{c_retry_after} IS NULL OR julianday(t.{c_retry_after}) <= {now})

-- fragment: due_lease
(t.{c_locked_until} IS NULL OR julianday(t.{c_locked_until}) <= {now})

-- fragment: live_attempt
COALESCE(t.{c_attempt}, 0) < :max_attempts

-- fragment: spent_attempt
COALESCE(t.{c_attempt}, 0) >= :max_attempts

-- fragment: order_priority
t.{c_priority} ASC NULLS FIRST

-- fragment: order_retry
t.{c_retry_after} ASC NULLS FIRST

-- fragment: order_id
t.{c_id}

-- fragment: bump_attempt
, {c_attempt} = COALESCE(t.{c_attempt}, 0) + 1

-- fragment: refund_attempt
, {c_attempt} = max(COALESCE(t.{c_attempt}, 0) - 1, 0)

-- fragment: fence_lease
julianday(t.{c_locked_until}) > {now}

-- fragment: fence_attempt
t.{c_attempt} = :fence

-- fragment: delay_retry
{c_retry_after} = {stamp_delay}, {c_locked_until} = NULL

-- fragment: delay_lease
{c_locked_until} = {stamp_delay}

-- fragment: held
t.{c_id} = :id AND {fence}

-- name: claim
-- Due rows in claim order (priority, retry_after, id), leased for the visibility timeout,
-- one attempt counted (the store's write transaction keeps claims apart).
UPDATE {table} AS t SET {c_locked_until} = {stamp_vt}{bump}
WHERE t.{c_id} IN (
  SELECT t.{c_id} FROM {table} t
  WHERE {due} AND {live}
  ORDER BY {order}
  LIMIT :limit
)
RETURNING *, (julianday('now') - 2440587.5) * 86400.0 + :vt AS alk_deadline

-- name: spent
-- Due rows whose attempts are spent (a lapsed lease of their last attempt): to dead-letter.
SELECT t.{c_id} AS alk_id FROM {table} t
WHERE {due} AND {spent}
ORDER BY {order}
LIMIT :limit

-- name: finish_mark
UPDATE {table} AS t SET {c_processed_at} = {stamp}, {c_locked_until} = NULL
WHERE {held} RETURNING {c_id} AS alk_id

-- name: finish_delete
DELETE FROM {table} AS t WHERE {held} RETURNING {c_id} AS alk_id

-- name: extend
UPDATE {table} AS t SET {c_locked_until} = {stamp_vt}
WHERE {held} RETURNING {c_id} AS alk_id

-- name: release
UPDATE {table} AS t SET {c_locked_until} = NULL{refund}
WHERE {held} RETURNING {c_id} AS alk_id

-- name: delay
UPDATE {table} AS t SET {delay_set}
WHERE {held} RETURNING {c_id} AS alk_id

-- name: bury_stay
-- Attempts spent, no dead letter configured: the row stays, its lease dropped; the
-- claim's {live} condition passes it over from now on.
UPDATE {table} AS t SET {c_locked_until} = NULL
WHERE {held} RETURNING {c_id} AS alk_id

-- name: bury_group
UPDATE {table} AS t SET {c_group} = :dead_group, {c_locked_until} = NULL
WHERE t.{c_id} = :id RETURNING {c_id} AS alk_id

-- name: bury_copy
INSERT INTO {dead_table} ({copy}) SELECT {copy} FROM {table} t WHERE t.{c_id} = :id

-- name: bury_delete
DELETE FROM {table} AS t WHERE t.{c_id} = :id RETURNING {c_id} AS alk_id

-- name: has_due
-- A row to claim, or a spent one to dead-letter (not one left in place).
SELECT EXISTS (SELECT 1 FROM {table} t WHERE {due} AND {wanted}) AS due

-- name: next_due
SELECT (min(julianday(t.{c_retry_after})) - 2440587.5) * 86400.0 AS at FROM {table} t
WHERE {in_group} AND {unfinished} AND {live} AND julianday(t.{c_retry_after}) > {now}

-- name: counts
SELECT
  count(*) FILTER (WHERE {due} AND {live}) AS pending,
  count(*) FILTER (WHERE {in_group} AND {unfinished}
                   AND julianday(t.{c_locked_until}) > {now}) AS processing,
  count(*) FILTER (WHERE {in_group} AND {unfinished} AND {spent}
                   AND (t.{c_locked_until} IS NULL OR julianday(t.{c_locked_until}) <= {now})) AS spent
FROM {table} t

-- name: delayed
SELECT count(*) AS n FROM {table} t
WHERE {in_group} AND {unfinished} AND {live} AND julianday(t.{c_retry_after}) > {now}
  AND (t.{c_locked_until} IS NULL OR julianday(t.{c_locked_until}) <= {now})

-- name: dead_group_count
SELECT count(*) AS n FROM {table} t WHERE t.{c_group} = :dead_group

-- name: dead_table_count
SELECT count(*) AS n FROM {dead_table}

-- name: columns
-- The table's columns (to check the mapping against); no row when it does not exist.
SELECT name FROM pragma_table_info(:table) ORDER BY cid
