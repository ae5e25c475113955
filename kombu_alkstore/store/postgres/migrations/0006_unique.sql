-- Schema version 6: unique tasks (issue 32, docs/flow-control.md).
--
-- jobs.unique_key is the key a publish carried (NULL for every job published without
-- one: the index below ignores those rows, so a publish without a key pays nothing).
-- jobs.unique_claimed says whether the key still counts once the job is claimed; where
-- it does not, a claim clears the key (see claim_due in queries.sql). A job holds its
-- key for as long as its row is in jobs with the key set: an ack deletes the row, a dead
-- letter or an expiry moves it to dead (which keeps no key), and the key is free again.

-- name: jobs_unique_key
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS unique_key TEXT

-- name: jobs_unique_claimed
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS unique_claimed BOOLEAN

-- name: jobs_unique
-- One live job per (queue, key): "insert_unique" names this index's columns and
-- predicate in its ON CONFLICT, so a second publish of a live key inserts nothing.
-- (Not on jobs split into generations, version 17, which cannot hold it: so the printed
-- setup script, every migration in turn, still runs on tables at that version.)
DO $$
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = '{jobs}'::regclass) = 'r' THEN
    CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique ON {jobs} (queue, unique_key)
    WHERE unique_key IS NOT NULL;
  END IF;
END $$
