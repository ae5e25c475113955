-- Schema version 9: a heartbeat in flight across its deadline no longer lets a limited
-- queue go over its limit (review finding 4 of stop 37). limited_due counted a claim
-- whose deadline had passed as free at once; a heartbeat that began just before the
-- deadline and committed just after then revived it beside the claim that took its
-- slot (limit 1: two live claims). Now a lapsed claim counts as free only when no other
-- transaction holds its row, and the heartbeat judges the deadline by the clock when it
-- reaches the row (queries.sql, heartbeat), so one waiting for this claim's lock finds
-- it passed. The rest of the function is version 7's.

-- name: limited_due
-- As in version 7, but for lfree. The claim's candidates on its queues that have a limit, within their limits: called by
-- claim_one and claim_any (queries.sql) only when one of their queues has a limit. First
-- it locks those queues' rows (FOR NO KEY UPDATE, in name order), so concurrent claimers
-- of a limited queue take turns; then it picks in a second query. The function is
-- VOLATILE PL/pgSQL, so that query takes a fresh snapshot, taken after the lock was
-- granted: it counts every claim committed by the claimers it waited for. (Under READ
-- COMMITTED a single statement reads from the snapshot it started with, before the wait,
-- and two claimers would both take the last slot.) "lcand": the due jobs of each limited
-- queue (locked, SKIP LOCKED; up to "scan" of a queue with per-key limits), "lroom" and
-- "kroom": the free slots of each queue and of each candidate key, "pick": those that
-- fit, in claim order; a spent one (buried by the claim) takes no slot. ROWS 1: the
-- planner's estimate for the claim of a queue without a limit, where it is not called
-- (the default, 1000, made the claim's UPDATE hash-join a scan of every job).
-- (CREATE OR REPLACE is idempotent; inside DO, so that every CREATE of the setup script
-- still reads IF NOT EXISTS, which tests/store/conformance/test_setup.py checks.)
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.limited_due(
  qs TEXT[], batch INTEGER, at DOUBLE PRECISION, scan INTEGER
) RETURNS TABLE (id BIGINT, priority SMALLINT, run_at DOUBLE PRECISION, spent BOOLEAN)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
#variable_conflict use_column
BEGIN
  PERFORM 1 FROM {queues} lq
  WHERE lq.name = ANY(qs) AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL)
  ORDER BY lq.name
  FOR NO KEY UPDATE OF lq;
  RETURN QUERY
  WITH lim AS (
    SELECT lq.name, lq.max_claimed, lq.key_limits::jsonb AS kl FROM {queues} lq
    WHERE lq.name = ANY(qs) AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM {paused_queues} pq WHERE pq.queue = lq.name)
  ),
  lcand AS (
    SELECT l.name AS queue, l.kl, c.id, c.priority, c.run_at, c.limit_key, c.spent
    FROM lim l CROSS JOIN LATERAL (
      SELECT j.id, j.priority, j.run_at, j.limit_key,
             (j.attempts >= j.max_attempts) AS spent
      FROM {jobs} j
      WHERE j.queue = l.name AND j.run_at <= at
        AND (j.expires_at IS NULL OR j.expires_at > at)
      ORDER BY j.priority DESC, j.run_at, j.id
      LIMIT CASE WHEN l.kl IS NULL THEN batch ELSE greatest(batch, scan) END
      FOR UPDATE OF j SKIP LOCKED
    ) c
  ),
  -- The lapsed claims no other transaction holds: their slots are free. A lapsed claim
  -- whose row another transaction holds (a heartbeat that began before its deadline and
  -- has not committed) still counts: FOR SHARE conflicts with that update, and an update
  -- that comes after waits for this claim, then finds the deadline passed (heartbeat).
  lfree AS (
    SELECT x.queue, x.limit_key FROM {jobs} x
    WHERE x.queue IN (SELECT l.name FROM lim l) AND x.state = 'processing'
      AND x.deadline <= at
    FOR SHARE OF x SKIP LOCKED
  ),
  lroom AS (
    SELECT l.name, l.max_claimed - (
      (SELECT count(*) FROM {jobs} x WHERE x.queue = l.name AND x.state = 'processing')
      - (SELECT count(*) FROM lfree f WHERE f.queue = l.name)) AS room
    FROM lim l WHERE l.max_claimed IS NOT NULL
  ),
  kroom AS (
    SELECT k.queue, k.limit_key, k.cap - (
      (SELECT count(*) FROM {jobs} x
       WHERE x.queue = k.queue AND x.limit_key = k.limit_key AND x.state = 'processing')
      - (SELECT count(*) FROM lfree f
         WHERE f.queue = k.queue AND f.limit_key = k.limit_key)) AS room
    FROM (
      SELECT DISTINCT c.queue, c.limit_key,
             COALESCE((c.kl ->> c.limit_key)::int, (c.kl ->> '*')::int) AS cap
      FROM lcand c WHERE c.kl IS NOT NULL AND c.limit_key IS NOT NULL AND NOT c.spent
    ) k
    WHERE k.cap IS NOT NULL
  )
  SELECT r.id, r.priority, r.run_at, r.spent FROM (
    SELECT k.*, row_number() OVER (PARTITION BY k.queue, k.spent
                                   ORDER BY k.priority DESC, k.run_at, k.id) AS qn
    FROM (
      SELECT c.*, u.room AS key_room,
             row_number() OVER (PARTITION BY c.queue, c.limit_key, c.spent
                                ORDER BY c.priority DESC, c.run_at, c.id) AS kn
      FROM lcand c LEFT JOIN kroom u ON u.queue = c.queue AND u.limit_key = c.limit_key
    ) k
    WHERE k.spent OR k.key_room IS NULL OR k.kn <= k.key_room
  ) r LEFT JOIN lroom q ON q.name = r.queue
  WHERE r.spent OR q.room IS NULL OR r.qn <= q.room
  ORDER BY r.priority DESC, r.run_at, r.id
  LIMIT batch;
END
$$;
END $migration$
