-- Schema version 1: the queue tables (6197933), with the jobs table's autovacuum settings
-- as 498cde6 added them while the version was still 1.
--
-- Every statement is idempotent (IF NOT EXISTS / ON CONFLICT), so the concatenation of
-- all migrations is also the script `kombu-alkstore setup --print` emits.
-- Slots: {schema} (quoted schema name), {jobs}... (schema-qualified table names).

-- name: schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: jobs
-- While pending, run_at is when the job becomes due; while processing it equals the
-- deadline, so a lapsed claim is simply due again in the same index. A queue table
-- churns: it is vacuumed early so claims do not walk dead index entries.
CREATE TABLE IF NOT EXISTS {jobs} (
    id BIGSERIAL NOT NULL,
    queue TEXT NOT NULL,
    msg_id TEXT,
    body BYTEA NOT NULL,
    priority SMALLINT DEFAULT 0 NOT NULL,
    state TEXT DEFAULT 'pending' NOT NULL,
    run_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    attempts INTEGER DEFAULT 0 NOT NULL,
    max_attempts INTEGER NOT NULL,
    visibility_timeout DOUBLE PRECISION NOT NULL,
    backoff_base DOUBLE PRECISION NOT NULL,
    deadline DOUBLE PRECISION,
    token BIGINT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02
);

-- name: jobs_claim
CREATE INDEX IF NOT EXISTS jobs_claim ON {jobs} (queue, priority DESC, run_at, id);

-- name: jobs_expiring
CREATE INDEX IF NOT EXISTS jobs_expiring ON {jobs} (expires_at) WHERE expires_at IS NOT NULL;

-- name: jobs_processing
CREATE INDEX IF NOT EXISTS jobs_processing ON {jobs} (queue) WHERE state = 'processing';

-- name: dead
CREATE TABLE IF NOT EXISTS {dead} (
    id BIGINT NOT NULL,
    queue TEXT NOT NULL,
    msg_id TEXT,
    body BYTEA NOT NULL,
    priority SMALLINT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    visibility_timeout DOUBLE PRECISION NOT NULL,
    backoff_base DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    died_at DOUBLE PRECISION NOT NULL,
    last_error TEXT NOT NULL,
    PRIMARY KEY (id)
);

-- name: dead_msg_id
CREATE INDEX IF NOT EXISTS dead_msg_id ON {dead} (msg_id) WHERE msg_id IS NOT NULL;

-- name: dead_queue
CREATE INDEX IF NOT EXISTS dead_queue ON {dead} (queue, died_at);

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
CREATE INDEX IF NOT EXISTS bindings_queue ON {bindings} (queue);

-- name: queues
-- message_ttl: x-message-ttl in seconds; expires: x-expires, the queue is dropped after
-- this long unused.
CREATE TABLE IF NOT EXISTS {queues} (
    name TEXT NOT NULL,
    message_ttl DOUBLE PRECISION,
    expires DOUBLE PRECISION,
    last_used DOUBLE PRECISION NOT NULL,
    visibility_timeout DOUBLE PRECISION,
    max_attempts INTEGER,
    backoff_base DOUBLE PRECISION,
    dead_letter_retention DOUBLE PRECISION,
    PRIMARY KEY (name)
);

-- name: schedules
-- origin: 'config' (beat_schedule) or 'api'.
CREATE TABLE IF NOT EXISTS {schedules} (
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    interval DOUBLE PRECISION NOT NULL,
    task TEXT NOT NULL,
    args TEXT NOT NULL,
    kwargs TEXT NOT NULL,
    options TEXT NOT NULL,
    next_at DOUBLE PRECISION NOT NULL,
    origin TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name)
);

-- name: leases
CREATE TABLE IF NOT EXISTS {leases} (
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name)
);

-- name: meta
-- schema_version is written by the migration runner (store/migrate.py) after each file.
CREATE TABLE IF NOT EXISTS {meta} (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (key)
);

-- name: routing_version
INSERT INTO {meta} (key, value) VALUES ('routing_version', '0') ON CONFLICT (key) DO NOTHING;
