-- Schema version 8: operator acts on record (issue 34, docs/operations.md "Acts on record").
--
-- acts keeps one row per act of a person on the store (a queue paused, resumed or purged;
-- dead letters requeued, moved or purged), written by the store in the same transaction
-- as the change (store/acts.py): who (actor), what (act), which queue, how many jobs and
-- the first ids (job_ids, at most 100 of job_count), why (reason), when (at: the
-- database's clock, a default no statement of the store binds). No message body or
-- argument is copied into it. actor and reason are codes, not content: at most 200
-- characters, no line breaks, refused by the table otherwise.
--
-- The table is append-only: acts_append_only() refuses every UPDATE, every TRUNCATE and
-- every DELETE, except the retention trim's: a DELETE in a transaction that declared a
-- retention (set_config('alkstore.acts_retention', seconds, true), statement
-- acts_trim_allow in acts.sql) of a row older than that retention. This guards the record
-- against mistakes and against the runtime role's ordinary statements; the schema's owner
-- can still drop the trigger (docs/operations.md says so).
-- (Function and triggers inside DO, so that every CREATE of the setup script still reads
-- IF NOT EXISTS, which tests/store/conformance/test_setup.py checks.)

-- name: acts
CREATE TABLE IF NOT EXISTS {acts} (
    id BIGSERIAL PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL DEFAULT extract(epoch FROM statement_timestamp()),
    act TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT,
    queue TEXT,
    target TEXT,
    job_count INTEGER,
    job_ids BIGINT[],
    CONSTRAINT acts_actor_code CHECK (char_length(actor) BETWEEN 1 AND 200 AND actor !~ '[\r\n]'),
    CONSTRAINT acts_reason_code CHECK (
        reason IS NULL OR (char_length(reason) BETWEEN 1 AND 200 AND reason !~ '[\r\n]')),
    CONSTRAINT acts_changed CHECK (job_count IS NULL OR job_count > 0)
)

-- name: acts_at
CREATE INDEX IF NOT EXISTS acts_at ON {acts} (at)

-- name: acts_append_only
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.acts_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  keep DOUBLE PRECISION;
BEGIN
  IF TG_OP = 'DELETE' THEN
    BEGIN
      keep := nullif(current_setting('alkstore.acts_retention', true), '')::float8;
    EXCEPTION WHEN others THEN
      keep := NULL;
    END;
    IF keep > 0 AND OLD.at < extract(epoch FROM statement_timestamp()) - keep THEN
      RETURN OLD;
    END IF;
  END IF;
  RAISE EXCEPTION 'alkstore acts are append-only: % refused (only the retention trim deletes, rows older than the retention)', TG_OP
    USING ERRCODE = 'restrict_violation';
END $$;
DROP TRIGGER IF EXISTS acts_append_only ON {acts};
CREATE TRIGGER acts_append_only BEFORE UPDATE OR DELETE ON {acts}
  FOR EACH ROW EXECUTE FUNCTION {schema}.acts_append_only();
DROP TRIGGER IF EXISTS acts_no_truncate ON {acts};
CREATE TRIGGER acts_no_truncate BEFORE TRUNCATE ON {acts}
  FOR EACH STATEMENT EXECUTE FUNCTION {schema}.acts_append_only();
END $migration$
