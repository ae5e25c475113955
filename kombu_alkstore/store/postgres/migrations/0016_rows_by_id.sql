-- Schema version 16: a claim's and an ack's rows are written by id through functions
-- planned without sequential scans (issue 35; docs/benchmarks.md, "Plans made on an
-- empty jobs table").
--
-- PostgreSQL keeps a prepared statement's generic plan until the table's statistics
-- change. A worker prepares its statements when it starts, often on an empty or just
-- truncated jobs table, where a sequential scan is the cheapest way to any row; a burst
-- of jobs later, with autovacuum off or not yet round to the table, each claim's UPDATE
-- and each ack's DELETE by id read the whole table: 200,000 delayed jobs made a claim
-- 28 ms instead of 0.5, and an ack read 4,767 blocks. Costs cannot fix it (on a small
-- table every lookup is dearer than a scan), so these writes run in functions whose
-- plans are made with sequential scans off: the primary key is then their only way.
-- Nothing else in a statement is planned so (the setting is the functions' own).

-- name: delete_rows
-- The jobs named by id and removed, returned whole: with tokens, only those still held
-- under that token and whose deadline is after "at" (an ack, a dead letter); a NULL
-- token (the claim's spent jobs) names the job by id alone.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.delete_rows(
  ids BIGINT[], tokens BIGINT[], at DOUBLE PRECISION
) RETURNS SETOF {jobs}
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
  RETURN QUERY
  DELETE FROM {jobs} j USING unnest(ids, tokens) AS h(id, token)
  WHERE j.id = ANY(ids) AND j.id = h.id
    AND (h.token IS NULL OR (j.token = h.token AND j.deadline > at))
  RETURNING j.*;
END $$;
END $migration$

-- name: claim_rows
-- The jobs named by id claimed at "at": processing, one more attempt, a fresh token
-- (as queries.sql's {token}), deadline and run_at one visibility timeout ahead; a key
-- held only while waiting (unique_claimed false) is dropped. Returned whole.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.claim_rows(
  ids BIGINT[], at DOUBLE PRECISION
) RETURNS SETOF {jobs}
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
  RETURN QUERY
  UPDATE {jobs} j
  SET state = 'processing', attempts = j.attempts + 1,
      token = floor(random() * 9000000000000000000)::bigint,
      deadline = at + j.visibility_timeout, run_at = at + j.visibility_timeout,
      unique_key = CASE WHEN j.unique_claimed THEN j.unique_key END
  WHERE j.id = ANY(ids)
  RETURNING j.*;
END $$;
END $migration$
