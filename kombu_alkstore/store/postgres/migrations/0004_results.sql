-- Schema version 4: the result backend's tables (kombu_alkstore.results, issue 30).
--
-- results: one row per Celery key (task meta "celery-task-meta-<id>", group meta
-- "celery-taskset-meta-<id>"), its encoded value as Celery's serializer wrote it, the
-- task's state and id (for a lookup by task id) and when it expires (NULL: never).
-- chords: a chord's header counter; chord_parts: each header task's result, recorded
-- once per (task id, header index), so a redelivered header task never counts twice.

-- name: results
CREATE TABLE IF NOT EXISTS {results} (
    key TEXT NOT NULL,
    task_id TEXT,
    state TEXT,
    value BYTEA NOT NULL,
    stored_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    PRIMARY KEY (key)
);

-- name: results_expires
CREATE INDEX IF NOT EXISTS results_expires ON {results} (expires_at)
    WHERE expires_at IS NOT NULL;

-- name: results_task
CREATE INDEX IF NOT EXISTS results_task ON {results} (task_id) WHERE task_id IS NOT NULL;

-- name: chords
-- size: the header's length once the chord is applied (NULL until then: a fast header
-- task may return first), extra: parts added by add_to_chord, done: distinct parts
-- recorded; fired: set by the one transaction whose part completed the chord.
CREATE TABLE IF NOT EXISTS {chords} (
    group_id TEXT NOT NULL,
    size BIGINT,
    extra BIGINT DEFAULT 0 NOT NULL,
    done BIGINT DEFAULT 0 NOT NULL,
    fired BOOLEAN DEFAULT false NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    PRIMARY KEY (group_id)
);

-- name: chords_expires
CREATE INDEX IF NOT EXISTS chords_expires ON {chords} (expires_at)
    WHERE expires_at IS NOT NULL;

-- name: chord_parts
-- idx: the header index (Celery's group_index; a very large number when unknown), seq the
-- arrival order among equal indexes.
CREATE TABLE IF NOT EXISTS {chord_parts} (
    group_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    seq BIGSERIAL NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (group_id, idx, task_id)
);
