-- Schema version 4: the result backend's tables (kombu_alkstore.results, issue 30); see
-- the PostgreSQL migration of the same number for what each holds.

-- name: results
CREATE TABLE IF NOT EXISTS {results} (
    key TEXT NOT NULL,
    task_id TEXT,
    state TEXT,
    value BLOB NOT NULL,
    stored_at DOUBLE NOT NULL,
    expires_at DOUBLE,
    PRIMARY KEY (key)
);

-- name: results_expires
CREATE INDEX IF NOT EXISTS "{prefix}results_expires" ON {results} (expires_at)
    WHERE expires_at IS NOT NULL;

-- name: results_task
CREATE INDEX IF NOT EXISTS "{prefix}results_task" ON {results} (task_id)
    WHERE task_id IS NOT NULL;

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
    created_at DOUBLE NOT NULL,
    expires_at DOUBLE,
    PRIMARY KEY (group_id)
);

-- name: chords_expires
CREATE INDEX IF NOT EXISTS "{prefix}chords_expires" ON {chords} (expires_at)
    WHERE expires_at IS NOT NULL;

-- name: chord_parts
-- seq: the arrival order among equal header indexes (rowid would do, but is implicit).
CREATE TABLE IF NOT EXISTS {chord_parts} (
    group_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (group_id, idx, task_id)
);
