-- Schema version 7: global concurrency limits (issue 32; see the PostgreSQL migration
-- and docs/flow-control.md). SQLite has one writer at a time, so a claim counts the
-- claims inside its write transaction and needs no lock or function. ADD COLUMN has no
-- IF NOT EXISTS: the runner applies this file only to tables stored at version 6.

-- name: queues_max_claimed
ALTER TABLE {queues} ADD COLUMN max_claimed INTEGER

-- name: queues_key_limits
ALTER TABLE {queues} ADD COLUMN key_limits TEXT

-- name: jobs_limit_key
ALTER TABLE {jobs} ADD COLUMN limit_key TEXT

-- name: jobs_limit_claimed
CREATE INDEX IF NOT EXISTS "{prefix}jobs_limit_claimed" ON {jobs} (queue, limit_key)
WHERE state = 'processing' AND limit_key IS NOT NULL
