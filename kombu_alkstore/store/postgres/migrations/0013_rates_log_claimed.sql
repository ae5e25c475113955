-- Schema version 13: a claim logs for its rates only the jobs it took (stop 44's CI run:
-- 7 claims logged for 6 tasks; docs/reliability.md 44.1). limited_due (version 11)
-- logged its picks itself, under the queues' row locks and from a snapshot taken after
-- them; the claim's UPDATE reads the statement's snapshot, taken before. A job
-- committed in between (published before the claim statement began and committed after:
-- while it waited for a queue's lock, or before the function ran) was picked and logged
-- but not claimed, and the queue ran below its rate for one period. limited_picks is
-- limited_due without the log: each pick comes with "log_at" (the time read under the
-- locks, for a pick a rate counts; else NULL), and the claim logs the jobs it took with
-- log_claim (postgres/queries.sql, claim_due) in the same transaction, so the queues'
-- row locks still serialise the count. A pick the claim did not take still advanced its
-- fair group's pass and is left out of rate_wait's "blocked": it waits for the queue's
-- next claim (the rate is never exceeded; fair order may slip by that one job).
-- limited_due stays for workers of version 12 during a rolling upgrade.

-- name: limited_picks
-- limited_due of version 11 (see 0011_fair_share.sql), returning log_at instead of
-- inserting into claim_log.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.limited_picks(
  qs TEXT[], batch INTEGER, at DOUBLE PRECISION, scan INTEGER
) RETURNS TABLE (id BIGINT, priority SMALLINT, run_at DOUBLE PRECISION, spent BOOLEAN,
                log_at DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
#variable_conflict use_column
DECLARE
  t DOUBLE PRECISION;
BEGIN
  PERFORM 1 FROM {queues} lq
  WHERE lq.name = ANY(qs)
    AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL OR lq.rate_limits IS NOT NULL
         OR lq.fair_shares IS NOT NULL)
  ORDER BY lq.name
  FOR NO KEY UPDATE OF lq;
  t := extract(epoch FROM clock_timestamp());
  DELETE FROM {claim_log} o USING {queues} lq
  WHERE lq.name = ANY(qs) AND lq.rate_limits IS NOT NULL AND o.queue = lq.name
    AND o.at <= t - (SELECT max((e.value ->> 1)::float8)
                     FROM jsonb_each(lq.rate_limits::jsonb) e);
  RETURN QUERY
  WITH RECURSIVE lim AS (
    SELECT lq.name, lq.max_claimed, lq.key_limits::jsonb AS kl,
           lq.rate_limits::jsonb AS rl, lq.rate_wait AS rw, lq.fair_shares::jsonb AS fs,
           COALESCE(lq.fair_pass::jsonb, '{}'::jsonb) AS fp, COALESCE(lq.fair_vtime, 0) AS vt
    FROM {queues} lq
    WHERE lq.name = ANY(qs)
      AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL
           OR lq.rate_limits IS NOT NULL OR lq.fair_shares IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM {paused_queues} pq WHERE pq.queue = lq.name)
  ),
  lscan AS (
    SELECT l.name AS queue, c.id, c.priority, c.run_at, c.limit_key, c.spent
    FROM lim l CROSS JOIN LATERAL (
      SELECT j.id, j.priority, j.run_at, j.limit_key,
             (j.attempts >= j.max_attempts) AS spent
      FROM {jobs} j
      WHERE j.queue = l.name AND j.run_at <= at
        AND (j.expires_at IS NULL OR j.expires_at > at)
      ORDER BY j.priority DESC, j.run_at, j.id
      LIMIT CASE WHEN l.kl IS NULL AND (l.rl IS NULL OR l.rl - '' = '{}'::jsonb)
                      AND l.fs IS NULL THEN batch
                 ELSE greatest(batch, scan) END
      FOR UPDATE OF j SKIP LOCKED
    ) c
  ),
  fkeys (queue, k) AS (  -- each fair queue's keys: one index probe per key
    SELECT l.name, (SELECT j.limit_key FROM {jobs} j
                    WHERE j.queue = l.name AND j.limit_key IS NOT NULL
                    ORDER BY j.limit_key LIMIT 1)
    FROM lim l WHERE l.fs IS NOT NULL
    UNION ALL
    SELECT f.queue, (SELECT j.limit_key FROM {jobs} j
                     WHERE j.queue = f.queue AND j.limit_key > f.k
                     ORDER BY j.limit_key LIMIT 1)
    FROM fkeys f WHERE f.k IS NOT NULL
  ),
  fcand AS (  -- each key's first due jobs
    SELECT f.queue, c.id, c.priority, c.run_at, c.limit_key, c.spent
    FROM fkeys f CROSS JOIN LATERAL (
      SELECT j.id, j.priority, j.run_at, j.limit_key,
             (j.attempts >= j.max_attempts) AS spent
      FROM {jobs} j
      WHERE j.queue = f.queue AND j.limit_key = f.k AND j.run_at <= at
        AND (j.expires_at IS NULL OR j.expires_at > at)
      ORDER BY j.priority DESC, j.run_at, j.id
      LIMIT batch
      FOR UPDATE OF j SKIP LOCKED
    ) c
    WHERE f.k IS NOT NULL
  ),
  lcand AS (
    SELECT u.queue, l.kl, l.rl, u.id, u.priority, u.run_at, u.limit_key, u.spent
    FROM (SELECT * FROM lscan UNION SELECT * FROM fcand) u JOIN lim l ON l.name = u.queue
  ),
  fstart AS (  -- each fair group's start and share
    SELECT g.queue, g.gk,
           greatest(COALESCE((l.fp ->> g.gk)::float8, 0), l.vt) AS start,
           COALESCE((l.fs ->> NULLIF(g.gk, ''))::float8, (l.fs ->> '*')::float8, 1) AS share
    FROM (SELECT DISTINCT c.queue, COALESCE(c.limit_key, '') AS gk FROM lcand c) g
    JOIN lim l ON l.name = g.queue AND l.fs IS NOT NULL
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
  ranked AS (
    SELECT c.*, least(u.room, kr.cap - kr.used) AS key_room,
           row_number() OVER (PARTITION BY c.queue, c.limit_key, c.spent
                              ORDER BY c.priority DESC, c.run_at, c.id) AS kn
    FROM lcand c
    LEFT JOIN kroom u ON u.queue = c.queue AND u.limit_key = c.limit_key
    LEFT JOIN krate kr ON kr.queue = c.queue AND kr.limit_key = c.limit_key
  ),
  tagged AS (
    SELECT r.*, (f.share IS NOT NULL AND NOT r.spent) AS fair,
           CASE WHEN f.share IS NULL OR r.spent THEN 0::float8
                ELSE f.start + (r.kn - 1) / f.share END AS s
    FROM ranked r LEFT JOIN fstart f
      ON f.queue = r.queue AND f.gk = COALESCE(r.limit_key, '')
    WHERE r.spent OR r.key_room IS NULL OR r.kn <= r.key_room
  ),
  qranked AS (
    SELECT t.*,
           row_number() OVER (PARTITION BY t.queue, t.spent
                              ORDER BY t.priority DESC, t.s, t.run_at, t.id) AS qn
    FROM tagged t
  ),
  -- each queue's due times in claim order: its i-th pick competes with the i-th (once:
  -- MATERIALIZED, or the aggregate is run again for every candidate)
  dues AS MATERIALIZED (
    SELECT t.queue, t.spent, array_agg(t.run_at ORDER BY t.priority DESC, t.run_at, t.id) AS ra
    FROM tagged t GROUP BY t.queue, t.spent
  ),
  pick AS (
    SELECT r.id, r.queue, r.limit_key, r.priority, r.run_at, r.spent, r.fair, r.s
    FROM qranked r
    JOIN dues e ON e.queue = r.queue AND e.spent = r.spent
    LEFT JOIN lroom q ON q.name = r.queue
    LEFT JOIN rroom rr ON rr.name = r.queue
    WHERE r.spent OR least(q.room, rr.cap - rr.used) IS NULL
       OR r.qn <= least(q.room, rr.cap - rr.used)
    ORDER BY r.priority DESC, e.ra[r.qn], r.s, r.id
    LIMIT batch
  ),
  ftook AS (
    SELECT p.queue, COALESCE(p.limit_key, '') AS gk, count(*) AS n, max(p.s) AS s
    FROM pick p WHERE p.fair GROUP BY p.queue, COALESCE(p.limit_key, '')
  ),
  fnew AS (  -- a fair queue's new vtime and the passes ahead of it
    SELECT v.queue, v.vt, (
      SELECT jsonb_object_agg(e.gk, e.pass) FROM (
        SELECT o.key AS gk, o.value::float8 AS pass FROM jsonb_each_text(l.fp) o
        WHERE o.key NOT IN (SELECT t.gk FROM ftook t WHERE t.queue = v.queue)
        UNION ALL
        SELECT t.gk, f.start + t.n / f.share FROM ftook t
        JOIN fstart f ON f.queue = t.queue AND f.gk = t.gk WHERE t.queue = v.queue
      ) e WHERE e.pass > v.vt)::text AS pass
    FROM (SELECT t.queue, greatest(max(t.s), max(l.vt)) AS vt FROM ftook t
          JOIN lim l ON l.name = t.queue GROUP BY t.queue) v
    JOIN lim l ON l.name = v.queue
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
  waits AS (  -- rate_wait when it changes (announced), a fair queue's passes
    UPDATE {queues} wq
    SET rate_wait = CASE WHEN w.rchanged THEN w.until ELSE wq.rate_wait END,
        rate_throttles = wq.rate_throttles
                         + CASE WHEN w.rchanged AND w.until IS NOT NULL THEN 1 ELSE 0 END,
        fair_vtime = CASE WHEN w.fvt IS NOT NULL THEN w.fvt ELSE wq.fair_vtime END,
        fair_pass = CASE WHEN w.fvt IS NOT NULL THEN w.fpass ELSE wq.fair_pass END
    FROM (SELECT l.name, th.until,
                 (l.rl IS NOT NULL AND l.rw IS DISTINCT FROM th.until) AS rchanged,
                 fn.vt AS fvt, fn.pass AS fpass
          FROM lim l LEFT JOIN throttle th ON th.queue = l.name
          LEFT JOIN fnew fn ON fn.queue = l.name
          WHERE l.rl IS NOT NULL OR l.fs IS NOT NULL) w
    WHERE wq.name = w.name AND (w.rchanged OR w.fvt IS NOT NULL)
    RETURNING CASE WHEN w.rchanged AND w.until IS NOT NULL THEN pg_notify(
      'alkstore_' || (SELECT n.nspname FROM pg_namespace n
                      WHERE n.oid = '{schema}'::regnamespace),
      json_build_array(w.until, wq.name)::text) END AS notified
  )
  SELECT p.id, p.priority, p.run_at, p.spent,
         CASE WHEN l.rl IS NOT NULL AND NOT p.spent THEN t END
  FROM pick p JOIN lim l ON l.name = p.queue
  ORDER BY p.priority DESC, p.run_at, p.id;
END
$$;
END $migration$

-- name: log_claim
-- One job a claim took into the rates' log, at the time limited_picks gave (claim_due);
-- true. (Inside DO, as limited_picks: see 0007_limits.sql.)
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.log_claim(
  q TEXT, k TEXT, t DOUBLE PRECISION
) RETURNS BOOLEAN LANGUAGE sql VOLATILE AS $$
  INSERT INTO {claim_log} (queue, limit_key, at) VALUES (q, k, t) RETURNING true;
$$;
END $migration$
