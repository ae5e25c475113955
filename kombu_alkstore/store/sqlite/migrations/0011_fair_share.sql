-- Schema version 11: fair share between the keys of a queue (issue 32; see the
-- PostgreSQL migration and docs/flow-control.md "Fair share"). queues.fair_shares holds
-- the shares as JSON ({"*": W, "<key>": W}; NULL: not fair), fair_vtime and fair_pass
-- the queue's virtual time and the groups ahead of it; jobs_fair lets a claim find a
-- fair queue's keys and each key's first due jobs. ADD COLUMN has no IF NOT EXISTS: the
-- runner applies this file only to tables stored at version 10.

-- name: queues_fair_shares
ALTER TABLE {queues} ADD COLUMN fair_shares TEXT

-- name: queues_fair_pass
ALTER TABLE {queues} ADD COLUMN fair_pass TEXT

-- name: queues_fair_vtime
ALTER TABLE {queues} ADD COLUMN fair_vtime REAL

-- name: jobs_fair
CREATE INDEX IF NOT EXISTS "{prefix}jobs_fair" ON {jobs} (queue, limit_key, priority DESC, run_at, id)
WHERE limit_key IS NOT NULL
