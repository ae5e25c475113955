-- Schema version 1: the queue tables (6197933; unchanged on SQLite until version 2).
--
-- SQLite has no schemas: the schema name is a table prefix. Slots: {jobs}... (quoted
-- prefixed table names), {prefix} (the prefix itself, for index names).
-- INTEGER PRIMARY KEY makes jobs.id the rowid; AUTOINCREMENT never reuses an id.

-- name: jobs
CREATE TABLE IF NOT EXISTS {jobs} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    msg_id TEXT,
    body BLOB NOT NULL,
    priority SMALLINT DEFAULT 0 NOT NULL,
    state TEXT DEFAULT 'pending' NOT NULL,
    run_at DOUBLE NOT NULL,
    expires_at DOUBLE,
    attempts INTEGER DEFAULT 0 NOT NULL,
    max_attempts INTEGER NOT NULL,
    visibility_timeout DOUBLE NOT NULL,
    backoff_base DOUBLE NOT NULL,
    deadline DOUBLE,
    token BIGINT,
    created_at DOUBLE NOT NULL
);

-- name: jobs_claim
CREATE INDEX IF NOT EXISTS "{prefix}jobs_claim" ON {jobs} (queue, priority DESC, run_at, id);

-- name: jobs_expiring
CREATE INDEX IF NOT EXISTS "{prefix}jobs_expiring" ON {jobs} (expires_at)
WHERE expires_at IS NOT NULL;

-- name: jobs_processing
CREATE INDEX IF NOT EXISTS "{prefix}jobs_processing" ON {jobs} (queue)
WHERE state = 'processing';

-- name: dead
CREATE TABLE IF NOT EXISTS {dead} (
    id INTEGER NOT NULL,
    queue TEXT NOT NULL,
    msg_id TEXT,
    body BLOB NOT NULL,
    priority SMALLINT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    visibility_timeout DOUBLE NOT NULL,
    backoff_base DOUBLE NOT NULL,
    expires_at DOUBLE,
    created_at DOUBLE NOT NULL,
    died_at DOUBLE NOT NULL,
    last_error TEXT NOT NULL,
    PRIMARY KEY (id)
);

-- name: dead_msg_id
CREATE INDEX IF NOT EXISTS "{prefix}dead_msg_id" ON {dead} (msg_id) WHERE msg_id IS NOT NULL;

-- name: dead_queue
CREATE INDEX IF NOT EXISTS "{prefix}dead_queue" ON {dead} (queue, died_at);

-- name: exchanges
CREATE TABLE IF NOT EXISTS {exchanges} (
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    PRIMARY KEY (name)
);

-- name: bindings
CREATE TABLE IF NOT EXISTS {bindings} (
    exchange TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    queue TEXT NOT NULL,
    PRIMARY KEY (exchange, routing_key, queue)
);

-- name: bindings_queue
CREATE INDEX IF NOT EXISTS "{prefix}bindings_queue" ON {bindings} (queue);

-- name: queues
-- message_ttl: x-message-ttl in seconds; expires: x-expires, the queue is dropped after
-- this long unused.
CREATE TABLE IF NOT EXISTS {queues} (
    name TEXT NOT NULL,
    message_ttl DOUBLE,
    expires DOUBLE,
    last_used DOUBLE NOT NULL,
    visibility_timeout DOUBLE,
    max_attempts INTEGER,
    backoff_base DOUBLE,
    dead_letter_retention DOUBLE,
    PRIMARY KEY (name)
);

-- name: schedules
-- origin: 'config' (beat_schedule) or 'api'.
CREATE TABLE IF NOT EXISTS {schedules} (
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    interval DOUBLE NOT NULL,
    task TEXT NOT NULL,
    args TEXT NOT NULL,
    kwargs TEXT NOT NULL,
    options TEXT NOT NULL,
    next_at DOUBLE NOT NULL,
    origin TEXT NOT NULL,
    updated_at DOUBLE NOT NULL,
    PRIMARY KEY (name)
);

-- name: leases
CREATE TABLE IF NOT EXISTS {leases} (
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at DOUBLE NOT NULL,
    PRIMARY KEY (name)
);

-- name: meta
-- schema_version is written by the migration runner (store/migrate.py) after each file.
CREATE TABLE IF NOT EXISTS {meta} (
    "key" TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY ("key")
);

-- name: routing_version
INSERT INTO {meta} (key, value) VALUES ('routing_version', '0') ON CONFLICT (key) DO NOTHING;
