-- Schema version 10: global rate limits (issue 32; see the PostgreSQL migration and
-- docs/flow-control.md "Rate limits"). queues.rate_limits holds the queue's rates as JSON
-- ({"": [N, P], "<key>": [N, P], "*": [N, P]}), queues.rate_wait the time before which
-- nothing due can be claimed (rate_throttles: how many times it was set), claim_log each claim of a queue with a rate. SQLite has
-- one writer at a time: a claim counts and logs inside its write transaction. ADD COLUMN
-- has no IF NOT EXISTS: the runner applies this file only to tables stored at version 9.

-- name: queues_rate_limits
ALTER TABLE {queues} ADD COLUMN rate_limits TEXT

-- name: queues_rate_wait
ALTER TABLE {queues} ADD COLUMN rate_wait REAL

-- name: queues_rate_throttles
ALTER TABLE {queues} ADD COLUMN rate_throttles INTEGER NOT NULL DEFAULT 0

-- name: claim_log
CREATE TABLE IF NOT EXISTS {claim_log} (
  queue TEXT NOT NULL,
  limit_key TEXT,
  at REAL NOT NULL
)

-- name: claim_log_queue
CREATE INDEX IF NOT EXISTS "{prefix}claim_log_queue" ON {claim_log} (queue, at)

-- name: claim_log_key
CREATE INDEX IF NOT EXISTS "{prefix}claim_log_key" ON {claim_log} (queue, limit_key, at)
WHERE limit_key IS NOT NULL

