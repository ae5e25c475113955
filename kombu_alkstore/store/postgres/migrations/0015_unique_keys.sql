-- Schema version 15: unique keys held in a table of their own, unique_keys (queue, key),
-- kept by triggers on jobs, instead of by the partial unique index jobs_unique alone.
-- The reason is the storage to come (docs/architecture.md, "Dead rows behind a pinned
-- horizon: rotating generations"): a table partitioned into generations can only have a
-- unique index that contains the generation, so a key could not span them. The triggers
-- act whoever writes jobs: this version's statements, a version-14 publisher during a
-- rolling upgrade (its insert_unique still names jobs_unique, which stays for it), the
-- acks, dead letters, expiries, purges and claims of either. A key is held from its
-- job's insert to the job's delete, or to the claim that clears it (unique_claimed
-- false); a publish whose key is held inserts no job and returns no row, as before, and
-- one whose key a transaction not yet committed holds waits for it, as the index made it.

-- name: unique_keys
CREATE TABLE IF NOT EXISTS {unique_keys} (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    PRIMARY KEY (queue, key)
)

-- name: unique_key_take
-- A job with a key takes it, or is not inserted (a BEFORE trigger returning NULL skips
-- the row: the INSERT inserts and returns nothing, as ON CONFLICT DO NOTHING did).
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.unique_key_take() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {unique_keys} (queue, key, job_id) VALUES (NEW.queue, NEW.unique_key, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS unique_key_take ON {jobs};
CREATE TRIGGER unique_key_take BEFORE INSERT ON {jobs}
  FOR EACH ROW WHEN (NEW.unique_key IS NOT NULL)
  EXECUTE FUNCTION {schema}.unique_key_take();
END $migration$

-- name: unique_key_free
-- A job deleted (acked, dead-lettered, expired, purged) frees its key, and so does a
-- claim that clears it. Only the job's own key row goes.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.unique_key_free() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {unique_keys} k
  WHERE k.queue = OLD.queue AND k.key = OLD.unique_key AND k.job_id = OLD.id;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS unique_key_free ON {jobs};
CREATE TRIGGER unique_key_free AFTER DELETE ON {jobs}
  FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL)
  EXECUTE FUNCTION {schema}.unique_key_free();
DROP TRIGGER IF EXISTS unique_key_cleared ON {jobs};
CREATE TRIGGER unique_key_cleared AFTER UPDATE OF unique_key ON {jobs}
  FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL AND NEW.unique_key IS NULL)
  EXECUTE FUNCTION {schema}.unique_key_free();
END $migration$

-- name: unique_keys_filled
-- The keys of the jobs stored before this version (the triggers above, made in this
-- transaction, hold jobs' lock until it commits, so none is written meanwhile).
INSERT INTO {unique_keys} (queue, key, job_id)
SELECT queue, unique_key, id FROM {jobs} WHERE unique_key IS NOT NULL
ON CONFLICT DO NOTHING
