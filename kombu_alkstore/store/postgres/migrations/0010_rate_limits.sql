-- Schema version 10: global rate limits (issue 32, docs/flow-control.md "Rate limits").
--
-- queues.rate_limits is a JSON object of the queue's rates, {"": [N, P], "<key>": [N, P],
-- "*": [N, P]}: at most N claims in any P seconds, "" for the whole queue, "<key>" for
-- the jobs of one limit key (jobs.limit_key), "*" for each key without its own entry;
-- NULL: no rate. claim_log keeps the time of each claim of a queue with a rate (the
-- database clock when the claim held the queue's row lock), for as long as the
-- queue's longest period. queues.rate_wait is the time before which nothing due in the
-- queue can be claimed (every due job the last claim left was refused by a rate), or
-- NULL: has_due and next_due read it, so a throttled queue's consumers do not claim in
-- a loop; queues.rate_throttles counts the times it was set. A queue without a rate pays nothing: its claim does not call limited_due.

-- name: queues_rate_limits
ALTER TABLE {queues} ADD COLUMN IF NOT EXISTS rate_limits TEXT

-- name: queues_rate_wait
ALTER TABLE {queues} ADD COLUMN IF NOT EXISTS rate_wait DOUBLE PRECISION

-- name: queues_rate_throttles
-- How many times a claim found every due job of the queue refused by a rate and set a
-- new rate_wait (the throttled claims of /metrics).
ALTER TABLE {queues} ADD COLUMN IF NOT EXISTS rate_throttles BIGINT NOT NULL DEFAULT 0

-- name: claim_log
CREATE TABLE IF NOT EXISTS {claim_log} (
  queue TEXT NOT NULL,
  limit_key TEXT,
  at DOUBLE PRECISION NOT NULL
)

-- name: claim_log_queue
-- The queue-wide counts (and the trim of claims older than every period).
CREATE INDEX IF NOT EXISTS claim_log_queue ON {claim_log} (queue, at)

-- name: claim_log_key
-- The per-key counts.
CREATE INDEX IF NOT EXISTS claim_log_key ON {claim_log} (queue, limit_key, at)
WHERE limit_key IS NOT NULL

-- name: limited_due
-- As in version 9 (concurrency limits, see 0007 and 0009), and rates. After the queues'
-- row locks, "t" is read from the clock: the claim's time in claim_log. Serialised by
-- the lock, a claim counts every claim logged before it whose time is within its
-- queue's (or key's) period before t; so at most N claims are logged in any P seconds
-- (half-open: (s, s + P]). "rroom"/"krate": each queue's and candidate key's rate and
-- its use; "pick" takes what fits every limit; "logged" records the picks (a spent job,
-- buried by the claim, takes no slot); "rest", "blocked", "throttle": when every due
-- job left is refused by a rate, the time the first of them could be claimed, stored
-- as rate_wait and announced ([time, queue] on the store's channel, as a delayed
-- publish is), so consumers claim again then; rate_wait is written (and announced)
-- only when it changes.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.limited_due(
  qs TEXT[], batch INTEGER, at DOUBLE PRECISION, scan INTEGER
) RETURNS TABLE (id BIGINT, priority SMALLINT, run_at DOUBLE PRECISION, spent BOOLEAN)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
#variable_conflict use_column
DECLARE
  t DOUBLE PRECISION;
BEGIN
  PERFORM 1 FROM {queues} lq
  WHERE lq.name = ANY(qs)
    AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL OR lq.rate_limits IS NOT NULL)
  ORDER BY lq.name
  FOR NO KEY UPDATE OF lq;
  t := extract(epoch FROM clock_timestamp());
  DELETE FROM {claim_log} o USING {queues} lq
  WHERE lq.name = ANY(qs) AND lq.rate_limits IS NOT NULL AND o.queue = lq.name
    AND o.at <= t - (SELECT max((e.value ->> 1)::float8)
                     FROM jsonb_each(lq.rate_limits::jsonb) e);
  RETURN QUERY
  WITH lim AS (
    SELECT lq.name, lq.max_claimed, lq.key_limits::jsonb AS kl,
           lq.rate_limits::jsonb AS rl
    FROM {queues} lq
    WHERE lq.name = ANY(qs)
      AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL
           OR lq.rate_limits IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM {paused_queues} pq WHERE pq.queue = lq.name)
  ),
  lcand AS (
    SELECT l.name AS queue, l.kl, l.rl, c.id, c.priority, c.run_at, c.limit_key, c.spent
    FROM lim l CROSS JOIN LATERAL (
      SELECT j.id, j.priority, j.run_at, j.limit_key,
             (j.attempts >= j.max_attempts) AS spent
      FROM {jobs} j
      WHERE j.queue = l.name AND j.run_at <= at
        AND (j.expires_at IS NULL OR j.expires_at > at)
      ORDER BY j.priority DESC, j.run_at, j.id
      LIMIT CASE WHEN l.kl IS NULL AND (l.rl IS NULL OR l.rl - '' = '{}'::jsonb) THEN batch
                 ELSE greatest(batch, scan) END
      FOR UPDATE OF j SKIP LOCKED
    ) c
  ),
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
  ),
  rroom AS (
    SELECT r.name, r.cap, r.per,
           (SELECT count(*) FROM {claim_log} x
            WHERE x.queue = r.name AND x.at > t - r.per) AS used,
           (SELECT min(x.at) FROM {claim_log} x
            WHERE x.queue = r.name AND x.at > t - r.per) AS oldest
    FROM (
      SELECT l.name, (l.rl -> '' ->> 0)::int AS cap, (l.rl -> '' ->> 1)::float8 AS per
      FROM lim l WHERE l.rl -> '' IS NOT NULL
    ) r
  ),
  krate AS (
    SELECT k.queue, k.limit_key, k.cap, k.per,
           (SELECT count(*) FROM {claim_log} x
            WHERE x.queue = k.queue AND x.limit_key = k.limit_key AND x.at > t - k.per)
             AS used,
           (SELECT min(x.at) FROM {claim_log} x
            WHERE x.queue = k.queue AND x.limit_key = k.limit_key AND x.at > t - k.per)
             AS oldest
    FROM (
      SELECT DISTINCT c.queue, c.limit_key,
             (COALESCE(c.rl -> c.limit_key, c.rl -> '*') ->> 0)::int AS cap,
             (COALESCE(c.rl -> c.limit_key, c.rl -> '*') ->> 1)::float8 AS per
      FROM lcand c WHERE c.rl IS NOT NULL AND c.limit_key IS NOT NULL AND NOT c.spent
    ) k
    WHERE k.cap IS NOT NULL
  ),
  pick AS (
    SELECT r.id, r.queue, r.limit_key, r.priority, r.run_at, r.spent FROM (
      SELECT k.*, row_number() OVER (PARTITION BY k.queue, k.spent
                                     ORDER BY k.priority DESC, k.run_at, k.id) AS qn
      FROM (
        SELECT c.*, least(u.room, kr.cap - kr.used) AS key_room,
               row_number() OVER (PARTITION BY c.queue, c.limit_key, c.spent
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS kn
        FROM lcand c
        LEFT JOIN kroom u ON u.queue = c.queue AND u.limit_key = c.limit_key
        LEFT JOIN krate kr ON kr.queue = c.queue AND kr.limit_key = c.limit_key
      ) k
      WHERE k.spent OR k.key_room IS NULL OR k.kn <= k.key_room
    ) r
    LEFT JOIN lroom q ON q.name = r.queue
    LEFT JOIN rroom rr ON rr.name = r.queue
    WHERE r.spent OR least(q.room, rr.cap - rr.used) IS NULL
       OR r.qn <= least(q.room, rr.cap - rr.used)
    ORDER BY r.priority DESC, r.run_at, r.id
    LIMIT batch
  ),
  logged AS (
    INSERT INTO {claim_log} (queue, limit_key, at)
    SELECT p.queue, p.limit_key, t FROM pick p JOIN lim l ON l.name = p.queue
    WHERE l.rl IS NOT NULL AND NOT p.spent
  ),
  tookq AS (
    SELECT p.queue, count(*) AS n FROM pick p WHERE NOT p.spent GROUP BY p.queue
  ),
  tookk AS (
    SELECT p.queue, p.limit_key, count(*) AS n FROM pick p
    WHERE NOT p.spent AND p.limit_key IS NOT NULL GROUP BY p.queue, p.limit_key
  ),
  blocked AS (
    SELECT c.queue,
           CASE WHEN rr.cap - rr.used - COALESCE(tq.n, 0) <= 0
                THEN COALESCE(rr.oldest, t) + rr.per END AS q_free,
           CASE WHEN kr.cap - kr.used - COALESCE(tk.n, 0) <= 0
                THEN COALESCE(kr.oldest, t) + kr.per END AS k_free
    FROM lcand c
    LEFT JOIN rroom rr ON rr.name = c.queue
    LEFT JOIN tookq tq ON tq.queue = c.queue
    LEFT JOIN krate kr ON kr.queue = c.queue AND kr.limit_key = c.limit_key
    LEFT JOIN tookk tk ON tk.queue = c.queue AND tk.limit_key = c.limit_key
    WHERE c.rl IS NOT NULL AND NOT c.spent AND c.id NOT IN (SELECT p.id FROM pick p)
  ),
  throttle AS (
    SELECT b.queue, min(greatest(b.q_free, b.k_free)) AS until FROM blocked b
    GROUP BY b.queue HAVING bool_and(b.q_free IS NOT NULL OR b.k_free IS NOT NULL)
  ),
  waits AS (
    UPDATE {queues} wq
    SET rate_wait = w.until,
        rate_throttles = wq.rate_throttles + CASE WHEN w.until IS NULL THEN 0 ELSE 1 END
    FROM (SELECT l.name, th.until FROM lim l LEFT JOIN throttle th ON th.queue = l.name
          WHERE l.rl IS NOT NULL) w
    WHERE wq.name = w.name AND wq.rate_wait IS DISTINCT FROM w.until
    RETURNING CASE WHEN w.until IS NOT NULL THEN pg_notify(
      'alkstore_' || (SELECT n.nspname FROM pg_namespace n
                      WHERE n.oid = '{schema}'::regnamespace),
      json_build_array(w.until, wq.name)::text) END AS notified
  )
  SELECT p.id, p.priority, p.run_at, p.spent FROM pick p
  ORDER BY p.priority DESC, p.run_at, p.id;
END
$$;
END $migration$
