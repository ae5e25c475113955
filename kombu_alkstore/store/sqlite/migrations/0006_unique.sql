-- Schema version 6: unique tasks (issue 32; see the PostgreSQL migration and
-- docs/flow-control.md). SQLite's ADD COLUMN has no IF NOT EXISTS: the runner applies
-- this file only to tables stored at version 5 and skips a column already there.

-- name: jobs_unique_key
ALTER TABLE {jobs} ADD COLUMN unique_key TEXT

-- name: jobs_unique_claimed
ALTER TABLE {jobs} ADD COLUMN unique_claimed INTEGER

-- name: jobs_unique
CREATE UNIQUE INDEX IF NOT EXISTS "{prefix}jobs_unique" ON {jobs} (queue, unique_key)
WHERE unique_key IS NOT NULL
