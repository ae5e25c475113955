-- Schema version 8: operator acts on record (issue 34; see the PostgreSQL migration and
-- docs/operations.md "Acts on record"). job_ids is a JSON array (at most 100 ids of
-- job_count); at is the database's clock (julianday('now') in epoch seconds), a default
-- no statement of the store binds.
--
-- Append-only: the triggers refuse every UPDATE, and every DELETE except of a row older
-- than the retention the trim declared in meta ('acts_retention', seconds; statement
-- acts_trim_allow in acts.sql, run in the trim's write transaction). Without that row no
-- DELETE passes.

-- name: acts
CREATE TABLE IF NOT EXISTS {acts} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at DOUBLE NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    act TEXT NOT NULL,
    actor TEXT NOT NULL CHECK (
        length(actor) BETWEEN 1 AND 200
        AND instr(actor, char(10)) = 0 AND instr(actor, char(13)) = 0),
    reason TEXT CHECK (
        reason IS NULL OR (length(reason) BETWEEN 1 AND 200
        AND instr(reason, char(10)) = 0 AND instr(reason, char(13)) = 0)),
    queue TEXT,
    target TEXT,
    job_count INTEGER CHECK (job_count IS NULL OR job_count > 0),
    job_ids TEXT
)

-- name: acts_at
CREATE INDEX IF NOT EXISTS "{prefix}acts_at" ON {acts} (at)

-- name: acts_no_update
CREATE TRIGGER IF NOT EXISTS "{prefix}acts_no_update" BEFORE UPDATE ON {acts}
BEGIN
  SELECT RAISE(ABORT, 'alkstore acts are append-only: UPDATE refused');
END

-- name: acts_no_delete
CREATE TRIGGER IF NOT EXISTS "{prefix}acts_no_delete" BEFORE DELETE ON {acts}
WHEN OLD.at >= (julianday('now') - 2440587.5) * 86400.0 - COALESCE(
  (SELECT CAST(value AS REAL) FROM {meta}
   WHERE "key" = 'acts_retention' AND CAST(value AS REAL) > 0), 1e308)
BEGIN
  SELECT RAISE(ABORT, 'alkstore acts are append-only: DELETE refused (only the retention trim deletes, rows older than the retention)');
END
