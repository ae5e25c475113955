-- Schema version 3: offers in place of waiters (f28aa9d); paused_queues, rates and the
-- dead_died index (the dashboard); the beat's schedule columns (e1f1f2b); jobs.revoked_at
-- (3d4ddc7). The version-2 waiters table is dropped (a fresh version 3 never had it).
--
-- SQLite's ADD COLUMN has no IF NOT EXISTS: the runner applies this file only to tables
-- stored at version 2 or below, which never have these columns. (The printed setup
-- script, which must be idempotent, is built differently: see store/schema.py.)

-- name: offers
-- queues: a JSON array of queue names (SQLite has no arrays).
CREATE TABLE IF NOT EXISTS {offers} (
    pid INTEGER NOT NULL,
    chan INTEGER NOT NULL,
    queues TEXT NOT NULL,
    slots INTEGER NOT NULL,
    PRIMARY KEY (pid, chan)
);

-- name: paused_queues
CREATE TABLE IF NOT EXISTS {paused_queues} (
    queue TEXT NOT NULL,
    paused_at DOUBLE NOT NULL,
    PRIMARY KEY (queue)
);

-- name: rates
CREATE TABLE IF NOT EXISTS {rates} (
    queue TEXT NOT NULL,
    minute DOUBLE NOT NULL,
    published BIGINT NOT NULL,
    acked BIGINT NOT NULL,
    PRIMARY KEY (queue, minute)
);

-- name: rates_minute
CREATE INDEX IF NOT EXISTS "{prefix}rates_minute" ON {rates} (minute);

-- name: dead_died
CREATE INDEX IF NOT EXISTS "{prefix}dead_died" ON {dead} (died_at);

-- name: schedules_kind
ALTER TABLE {schedules} ADD COLUMN kind TEXT DEFAULT 'every' NOT NULL;

-- name: schedules_tz
ALTER TABLE {schedules} ADD COLUMN tz TEXT DEFAULT 'UTC' NOT NULL;

-- name: schedules_enabled
ALTER TABLE {schedules} ADD COLUMN enabled BOOLEAN DEFAULT true NOT NULL;

-- name: schedules_last_run_at
ALTER TABLE {schedules} ADD COLUMN last_run_at DOUBLE;

-- name: schedules_run_count
ALTER TABLE {schedules} ADD COLUMN run_count BIGINT DEFAULT 0 NOT NULL;

-- name: schedules_last_error
ALTER TABLE {schedules} ADD COLUMN last_error TEXT;

-- name: schedules_run_requested
ALTER TABLE {schedules} ADD COLUMN run_requested DOUBLE;

-- name: jobs_revoked_at
ALTER TABLE {jobs} ADD COLUMN revoked_at DOUBLE;

-- name: drop_waiters
-- Offers replaced it (its index goes with it).
DROP TABLE IF EXISTS {waiters};
