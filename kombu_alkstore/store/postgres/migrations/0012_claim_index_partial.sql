-- Schema version 12: the claim index jobs_claim becomes partial, WHERE queue IS NOT NULL
-- (every row: queue is NOT NULL). Every statement that walks it names the queue (an
-- equality implies the predicate); a statement that names jobs by id alone (an ack, a
-- heartbeat, a claim's update) can then use only the primary key. Behind a pinned xmin
-- horizon ANALYZE can find no live row (reltuples 0), every index then costs the
-- planner one page, and it took jobs_claim for such lookups: a read of every dead entry
-- per ack (issue 35, docs/benchmarks.md "Plans when ANALYZE finds jobs empty").
-- Rebuilt only where it is not partial yet; the rebuild holds the table's lock while it
-- runs (a queue table is small unless bloated: VACUUM it first).

-- name: jobs_claim_partial
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_index
             WHERE indexrelid = to_regclass('{schema}.jobs_claim') AND indpred IS NULL) THEN
    DROP INDEX {schema}.jobs_claim;
    CREATE INDEX jobs_claim ON {jobs} (queue, priority DESC, run_at, id)
    WHERE queue IS NOT NULL;
  END IF;
END $$
