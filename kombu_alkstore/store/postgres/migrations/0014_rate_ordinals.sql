-- Schema version 14: a rated claim reads its windows' use in two index probes each, not
-- a count of the window's rows (docs/flow-control.md "How it is enforced"). Until now
-- each claim of a rated queue counted the log rows within each of its rates' periods, so
-- its cost grew with the rate it ran at: a queue at 1000000/s read ~3,900 log rows per
-- claim. claim_log rows get ordinals: n, consecutive per queue, and kn, consecutive per
-- (queue, limit_key), and "at" never decreases along them (a clock that steps back logs
-- the previous time). The trim deletes the oldest rows, so a queue's rows are always one
-- run of ordinals, and a window's count is (last n) - (first n within it) + 1. The
-- trigger numbers every insert, whoever makes it (log_claim, and limited_due of
-- version-12 workers during a rolling upgrade), under the queues' row locks that
-- every logging claim holds; it sees the rows logged before it in the same statement.

-- name: claim_log_n
ALTER TABLE {claim_log} ADD COLUMN IF NOT EXISTS n BIGINT

-- name: claim_log_kn
ALTER TABLE {claim_log} ADD COLUMN IF NOT EXISTS kn BIGINT

-- name: claim_log_numbered
-- The rows logged before this version, numbered in their order; the lock keeps claims
-- of older workers from logging until the trigger is there (same transaction).
DO $migration$ BEGIN
LOCK TABLE {claim_log} IN SHARE ROW EXCLUSIVE MODE;
UPDATE {claim_log} o SET n = r.n, kn = r.kn
FROM (SELECT x.ctid AS row_id,
             row_number() OVER (PARTITION BY x.queue ORDER BY x.at) AS n,
             CASE WHEN x.limit_key IS NOT NULL THEN
               row_number() OVER (PARTITION BY x.queue, x.limit_key ORDER BY x.at) END AS kn
      FROM {claim_log} x) r
WHERE o.ctid = r.row_id AND o.n IS NULL;
END $migration$

-- name: claim_log_number
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.claim_log_number() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  last_at DOUBLE PRECISION;
  last_n BIGINT;
BEGIN
  SELECT x.at, x.n INTO last_at, last_n FROM {claim_log} x
  WHERE x.queue = NEW.queue ORDER BY x.at DESC, x.n DESC LIMIT 1;
  NEW.at := greatest(NEW.at, last_at);
  NEW.n := COALESCE(last_n, 0) + 1;
  IF NEW.limit_key IS NOT NULL THEN
    NEW.kn := COALESCE((SELECT x.kn FROM {claim_log} x
                        WHERE x.queue = NEW.queue AND x.limit_key = NEW.limit_key
                        ORDER BY x.at DESC, x.kn DESC LIMIT 1), 0) + 1;
  END IF;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS claim_log_number ON {claim_log};
CREATE TRIGGER claim_log_number BEFORE INSERT ON {claim_log}
  FOR EACH ROW EXECUTE FUNCTION {schema}.claim_log_number();
END $migration$

-- name: claim_log_order
-- A queue's claims in their order (the first within a window, the last).
CREATE INDEX IF NOT EXISTS claim_log_order ON {claim_log} (queue, at, n)

-- name: claim_log_key_order
CREATE INDEX IF NOT EXISTS claim_log_key_order ON {claim_log} (queue, limit_key, at, kn)
WHERE limit_key IS NOT NULL

-- name: claim_log_queue_retired
-- claim_log_order serves its reads (its first columns).
DROP INDEX IF EXISTS {schema}.claim_log_queue

-- name: claim_log_key_retired
DROP INDEX IF EXISTS {schema}.claim_log_key

-- name: limited_picks
-- As in version 13, but a window's claims counted from the ordinals (rroom, krate), and
-- the trim of claims older than every period made per queue with its cutoff computed
-- first: as one DELETE whose cutoff was a subquery on the queue's row, the planner came
-- to scan the whole log with the subquery run per row once the log had grown (never
-- analyzed: 8,600 rows at 1000000/m, 20 ms of a claim's 22).
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.limited_picks(
  qs TEXT[], batch INTEGER, at DOUBLE PRECISION, scan INTEGER
) RETURNS TABLE (id BIGINT, priority SMALLINT, run_at DOUBLE PRECISION, spent BOOLEAN,
                log_at DOUBLE PRECISION)
LANGUAGE plpgsql VOLATILE ROWS 1 AS $$
#variable_conflict use_column
DECLARE
  t DOUBLE PRECISION;
  q TEXT;
  cutoff DOUBLE PRECISION;
BEGIN
  PERFORM 1 FROM {queues} lq
  WHERE lq.name = ANY(qs)
    AND (lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL OR lq.rate_limits IS NOT NULL
         OR lq.fair_shares IS NOT NULL)
  ORDER BY lq.name
  FOR NO KEY UPDATE OF lq;
  t := extract(epoch FROM clock_timestamp());
  -- the trim, one queue at a time: its cutoff a value, so always a range of claim_log_order
  FOR q, cutoff IN
    SELECT lq.name, t - max((e.value ->> 1)::float8)
    FROM {queues} lq, jsonb_each(lq.rate_limits::jsonb) e
    WHERE lq.name = ANY(qs) AND lq.rate_limits IS NOT NULL GROUP BY lq.name
  LOOP
    DELETE FROM {claim_log} o WHERE o.queue = q AND o.at <= cutoff;
  END LOOP;
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
  rroom AS (  -- the window's claims: its first and the queue's last ordinal, two probes
    SELECT r.name, r.cap, r.per, COALESCE(lst.n - fst.n + 1, 0) AS used, fst.at AS oldest
    FROM (
      SELECT l.name, (l.rl -> '' ->> 0)::int AS cap, (l.rl -> '' ->> 1)::float8 AS per
      FROM lim l WHERE l.rl -> '' IS NOT NULL
    ) r
    LEFT JOIN LATERAL (
      SELECT x.n, x.at FROM {claim_log} x
      WHERE x.queue = r.name AND x.at > t - r.per ORDER BY x.at, x.n LIMIT 1
    ) fst ON true
    LEFT JOIN LATERAL (
      SELECT x.n FROM {claim_log} x WHERE x.queue = r.name ORDER BY x.at DESC, x.n DESC LIMIT 1
    ) lst ON true
  ),
  krate AS (
    SELECT k.queue, k.limit_key, k.cap, k.per, COALESCE(lst.kn - fst.kn + 1, 0) AS used,
           fst.at AS oldest
    FROM (
      SELECT DISTINCT c.queue, c.limit_key,
             (COALESCE(c.rl -> c.limit_key, c.rl -> '*') ->> 0)::int AS cap,
             (COALESCE(c.rl -> c.limit_key, c.rl -> '*') ->> 1)::float8 AS per
      FROM lcand c WHERE c.rl IS NOT NULL AND c.limit_key IS NOT NULL AND NOT c.spent
    ) k
    LEFT JOIN LATERAL (
      SELECT x.kn, x.at FROM {claim_log} x
      WHERE x.queue = k.queue AND x.limit_key = k.limit_key AND x.at > t - k.per
      ORDER BY x.at, x.kn LIMIT 1
    ) fst ON true
    LEFT JOIN LATERAL (
      SELECT x.kn FROM {claim_log} x
      WHERE x.queue = k.queue AND x.limit_key = k.limit_key
      ORDER BY x.at DESC, x.kn DESC LIMIT 1
    ) lst ON true
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
