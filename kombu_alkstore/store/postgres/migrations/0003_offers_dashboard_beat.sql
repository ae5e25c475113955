-- Schema version 3: offers (one row per channel, its slots shared by its queues: f28aa9d)
-- in place of waiters; paused_queues, rates and the dead_died index (the dashboard); the
-- beat's schedule columns (kinds, time zones, lifecycle: e1f1f2b); jobs.revoked_at
-- (durable revoke: 3d4ddc7).
--
-- The version-2 waiters table is dropped (a fresh version 3 never had it; an upgraded one
-- kept it unused). A version-2 worker still running after this migration fails its
-- publishes' hand-off step until it is restarted on the new version.

-- name: offers
-- Idle consumers a publisher may hand a new job to directly: one row per (LISTEN
-- backend, kombu channel), its free slots shared by all the queues it consumes. pid
-- also names the advisory lock that backend holds while it lives, so a row left by a
-- dead worker is never used.
CREATE TABLE IF NOT EXISTS {offers} (
    pid INTEGER NOT NULL,
    chan INTEGER NOT NULL,
    queues TEXT[] NOT NULL,
    slots INTEGER NOT NULL,
    PRIMARY KEY (pid, chan)
);

-- name: paused_queues
-- Paused queues: claims and hand-offs skip them, publishes still land.
CREATE TABLE IF NOT EXISTS {paused_queues} (
    queue TEXT NOT NULL,
    paused_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (queue)
);

-- name: rates
-- Publishes and acks per queue and minute, flushed every few seconds by each process
-- (Store.flush_rates): the dashboard's rate chart, kept across restarts.
CREATE TABLE IF NOT EXISTS {rates} (
    queue TEXT NOT NULL,
    minute DOUBLE PRECISION NOT NULL,
    published BIGINT NOT NULL,
    acked BIGINT NOT NULL,
    PRIMARY KEY (queue, minute)
);

-- name: rates_minute
CREATE INDEX IF NOT EXISTS rates_minute ON {rates} (minute);

-- name: dead_died
-- The dashboard's newest-first dead letters.
CREATE INDEX IF NOT EXISTS dead_died ON {dead} (died_at);

-- name: schedules_kind
-- 'every' or 'cron'.
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS kind TEXT DEFAULT 'every' NOT NULL;

-- name: schedules_tz
-- An IANA zone name.
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS tz TEXT DEFAULT 'UTC' NOT NULL;

-- name: schedules_enabled
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS enabled BOOLEAN DEFAULT true NOT NULL;

-- name: schedules_last_run_at
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS last_run_at DOUBLE PRECISION;

-- name: schedules_run_count
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS run_count BIGINT DEFAULT 0 NOT NULL;

-- name: schedules_last_error
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS last_error TEXT;

-- name: schedules_run_requested
-- Run-now: when it was requested (cleared when the schedule fires).
ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS run_requested DOUBLE PRECISION;

-- name: jobs_revoked_at
-- When a Celery revoke of this task reached the broker (Store.revoke): a claim delivers
-- the job marked, so the worker discards it, whatever its restarts.
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS revoked_at DOUBLE PRECISION;

-- name: drop_waiters
-- Offers replaced it (its index goes with it).
DROP TABLE IF EXISTS {waiters};
