-- The SQLite engine's statements (see kombu_alkstore/store/sqlfile.py).
--
-- {jobs}, {dead}, ... are the schema's tables (prefixed names); every other {word} is a
-- fragment below. Bound parameters are sqlite3's :name; :now (epoch seconds, the
-- host's clock) is bound to every statement by the store unless the caller gives one.
-- Lists are bound as JSON text and read with json_each().

-- fragment: active_names
-- The queues a claim or a due check looks at: those of :queues, less the paused ones
-- (see Store.pause_queue), as a SELECT of "value" (an IN list, or a table to scan).
SELECT value FROM json_each(:queues) WHERE value NOT IN (SELECT queue FROM {paused_queues})

-- fragment: active_queues
queue IN ({active_names})

-- fragment: revoked
-- Whether job j's task was revoked (Store.revoke); jobs.revoked_at holds the marks a
-- version-4 store made.
(j.revoked_at IS NOT NULL OR EXISTS (SELECT 1 FROM {revokes} r WHERE r.msg_id = j.msg_id))

-- fragment: held
-- The validity of every operation on a claim: :held is [[id, token], ...]; right
-- token, still held, deadline not passed.
(id, token) IN (SELECT value->>0, value->>1 FROM json_each(:held))
AND state = 'processing' AND deadline > :now

-- fragment: spent
-- A lapsed claim of an active queue whose attempts are spent: a claim buries it
-- (it took a place among the due jobs) instead of claiming it again.
{active_queues} AND state = 'processing' AND run_at <= :now AND attempts >= max_attempts

-- fragment: expired
-- An expired job that is not running (pending, or a lapsed claim): expiry is about
-- starting, so a live claim is left to finish.
expires_at IS NOT NULL AND expires_at <= :now AND (state = 'pending' OR deadline <= :now)

-- fragment: lapsed
-- A lapsed claim with no attempt left (any queue, paused ones included); an expired
-- one is left to "expire".
state = 'processing' AND deadline <= :now AND attempts >= max_attempts
AND (expires_at IS NULL OR expires_at > :now)

-- fragment: transient
-- A queue (alias q) declared transient (x-expires or x-message-ttl: event and reply
-- queues), whose expired messages are dropped rather than dead-lettered.
(q.expires IS NOT NULL OR q.message_ttl IS NOT NULL)

-- fragment: dead_columns
-- The columns a job keeps when it moves to the dead letters.
id, queue, msg_id, body, priority, attempts, max_attempts, visibility_timeout,
backoff_base, expires_at, created_at

-- fragment: dead_values
-- The same, as named parameters (a row of dead_columns, by name).
:id, :queue, :msg_id, :body, :priority, :attempts, :max_attempts, :visibility_timeout,
:backoff_base, :expires_at, :created_at

-- fragment: job_read
-- A live job as Job(**row).
id, queue, msg_id, body, priority, state, attempts, max_attempts, created_at, run_at,
expires_at, deadline, NULL AS died_at, NULL AS last_error

-- fragment: dead_read
-- A dead letter as Job(**row).
id, queue, msg_id, body, priority, 'dead' AS state, attempts, max_attempts, created_at,
NULL AS run_at, expires_at, NULL AS deadline, died_at, last_error

-- fragment: dead_pick
-- Dead letters by id (:ids, JSON; NULL: all) and queue (NULL: any).
(:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
AND (:queue IS NULL OR queue = :queue)

-- fragment: dead_filter
-- The dashboard's dead-letter filter (admin.DeadFilter.params); every part optional.
(:queue IS NULL OR queue = :queue)
  AND (:since IS NULL OR died_at >= :since) AND (:until IS NULL OR died_at < :until)
  AND (:error IS NULL OR instr(lower(last_error), lower(:error)) > 0)
  AND (:task1 IS NULL OR instr(body, :task1) > 0 OR instr(body, :task2) > 0)

-- fragment: dead_before
-- Dead letters after a page's last one (b_at, b_id), newest first; all without one.
(:b_at IS NULL OR (died_at, id) < (:b_at, :b_id))

-- fragment: requeued_columns
-- What a dead letter keeps when it goes back to a queue (attempts start again).
id, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base, created_at,
run_at, attempts

-- fragment: schedule_columns
name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
last_run_at, run_count, last_error, run_requested


-- name: open_wal
-- Every connection of the store: the file in WAL mode (readers beside one writer).
PRAGMA journal_mode = WAL

-- name: open_synchronous
-- NORMAL in WAL mode: a commit survives a process crash (kill -9); an OS crash or
-- power loss may lose the last commits.
PRAGMA synchronous = NORMAL

-- name: begin
-- A write transaction takes the database lock up front (waiting up to the busy timeout).
BEGIN IMMEDIATE

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: data_version
-- Changes when another connection commits to the file (the waiter polls it).
PRAGMA data_version

-- name: database_file
-- The file a connection's main database is (empty for an in-memory one).
SELECT file FROM pragma_database_list WHERE name = 'main'

-- name: table_exists
SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = :table

-- name: version
SELECT value FROM {meta} WHERE key = 'schema_version'

-- name: ping
SELECT 1 AS ok


-- name: insert
INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                    visibility_timeout, backoff_base, created_at, limit_key)
VALUES (:queue, :msg_id, :body, :priority, :run_at,
  COALESCE(:expires_at, :now + (SELECT message_ttl FROM {queues} WHERE name = :queue)),
  COALESCE(:ma, (SELECT max_attempts FROM {queues} WHERE name = :queue), :d_ma),
  COALESCE(:vt, (SELECT visibility_timeout FROM {queues} WHERE name = :queue), :d_vt),
  COALESCE(:bb, (SELECT backoff_base FROM {queues} WHERE name = :queue), :d_bb),
  :now, :limit_key)
RETURNING id

-- name: insert_unique
-- A job with a unique key (see store/unique.py): inserted unless a live job of its queue
-- holds the key (the partial unique index jobs_unique); a duplicate returns no row.
INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                    visibility_timeout, backoff_base, created_at, unique_key,
                    unique_claimed, limit_key)
VALUES (:queue, :msg_id, :body, :priority, :run_at,
  COALESCE(:expires_at, :now + (SELECT message_ttl FROM {queues} WHERE name = :queue)),
  COALESCE(:ma, (SELECT max_attempts FROM {queues} WHERE name = :queue), :d_ma),
  COALESCE(:vt, (SELECT visibility_timeout FROM {queues} WHERE name = :queue), :d_vt),
  COALESCE(:bb, (SELECT backoff_base FROM {queues} WHERE name = :queue), :d_bb),
  :now, :unique_key, :unique_claimed, :limit_key)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id

-- name: unique_holder
-- The live job holding a unique key in a queue (at most one: the index jobs_unique).
SELECT {job_read} FROM {jobs} WHERE queue = :queue AND unique_key = :unique_key

-- fragment: full_queues
-- The queues of :queues whose concurrency limit is reached (migration 0007): nothing of
-- theirs can be claimed until a claim ends, whose commit wakes the waiters.
SELECT lq.name FROM {queues} lq
WHERE lq.name IN (SELECT value FROM json_each(:queues)) AND lq.max_claimed IS NOT NULL
  AND lq.max_claimed <= (SELECT count(*) FROM {jobs} x WHERE x.queue = lq.name
                         AND x.state = 'processing' AND x.deadline > :now)

-- fragment: blocked_queues
-- The queues of :queues at their concurrency limit (as full_queues), or whose rates
-- refused every due job their last claim left, until rate_wait (migration 0010):
-- nothing of theirs can be claimed now. One probe of the queues table, as before rates.
SELECT lq.name FROM {queues} lq
WHERE lq.name IN (SELECT value FROM json_each(:queues))
  AND (lq.rate_wait > :now
       OR lq.max_claimed <= (SELECT count(*) FROM {jobs} x WHERE x.queue = lq.name
                             AND x.state = 'processing' AND x.deadline > :now))

-- fragment: bands
-- The priorities present in each queue of :queues (less the paused and the blocked
-- ones), highest first: one seek of the claim index each (a loose index scan, as
-- next_due's). Within one (queue, priority) the index is in run_at order, so a walk of
-- the due jobs stops at the first one not due; over the whole queue it read every
-- delayed (ETA) and in-flight job whenever fewer were due than it looked for.
bands(queue, p) AS (
  SELECT qn.value, (SELECT priority FROM {jobs} WHERE queue = qn.value
                    ORDER BY priority DESC LIMIT 1)
  FROM ({active_names}) AS qn WHERE qn.value NOT IN ({blocked_queues})
  UNION ALL
  SELECT b.queue, (SELECT j.priority FROM {jobs} j WHERE j.queue = b.queue
                   AND j.priority < b.p ORDER BY j.priority DESC LIMIT 1)
  FROM bands b WHERE b.p IS NOT NULL
)

-- name: claim_probe
-- Anything due (a lapsed claim included) that a claim may take? A read: a claim with
-- nothing due, or only jobs of queues at their limit or throttled by a rate, takes no
-- write lock. One range of the claim index per band (bands).
WITH RECURSIVE {bands}
SELECT 1 AS due FROM bands b
WHERE b.p IS NOT NULL AND EXISTS (
  SELECT 1 FROM {jobs} j WHERE j.queue = b.queue AND j.priority = b.p AND j.run_at <= :now)
LIMIT 1

-- name: take_spent
-- The spent lapsed claims among the due jobs, out of the queue (to "bury").
DELETE FROM {jobs} WHERE {spent} RETURNING {dead_columns}

-- name: bury
-- One row of dead_columns (a job taken out of the queue) into the dead letters.
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
VALUES ({dead_values}, :now, :error)

-- fragment: has_limit
-- A queue row (alias lq) with a concurrency limit (migration 0007), a rate (0010) or
-- fair share (0011).
(lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL OR lq.rate_limits IS NOT NULL
 OR lq.fair_shares IS NOT NULL)

-- fragment: limit_scan
-- How many due jobs a claim on queues with per-key limits looks at (at least its
-- batch): jobs beyond them wait for the next claim even when their keys have room.
256

-- fragment: per_key
-- Whether a limited queue of "lim" (its key_limits, rate_limits as rl, fair_shares as fs)
-- limits its keys: a per-key concurrency limit or rate, or fair share. Only then can a
-- due job be refused while later ones fit, so only then does a claim look at more due
-- jobs than its batch (limit_scan), as PostgreSQL's limited_picks.
EXISTS (SELECT 1 FROM lim l2
        WHERE l2.key_limits IS NOT NULL OR l2.fs IS NOT NULL
           OR EXISTS (SELECT 1 FROM json_each(l2.rl) e WHERE e.key <> ''))

-- name: claim_pick
-- The claim's candidates, in claim order, and whether their task was revoked: the first
-- :limit due jobs of each band (bands), the best :limit of them.
WITH RECURSIVE {bands}
SELECT j.id, {revoked} AS revoked
FROM bands b CROSS JOIN {jobs} j
WHERE b.p IS NOT NULL AND j.id IN (
  SELECT x.id FROM {jobs} x
  WHERE x.queue = b.queue AND x.priority = b.p AND x.run_at <= :now
    AND (x.expires_at IS NULL OR x.expires_at > :now) AND x.attempts < x.max_attempts
  ORDER BY x.run_at, x.id LIMIT :limit)
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :limit

-- name: limited_queues
-- Whether any queue of :queues has a concurrency limit (a primary-key probe each): the
-- claim then picks with claim_pick_limited, else with claim_pick, as before limits.
SELECT 1 AS limited FROM {queues} lq
WHERE lq.name IN (SELECT value FROM json_each(:queues)) AND {has_limit} LIMIT 1

-- name: claim_pick_limited
-- The claim's candidates, in claim order, and whether their task was revoked. Queues
-- without a limit ("lim": one primary-key probe each) as before; those with one within
-- it: the claim runs in the write transaction, so counting their live claims is exact
-- (docs/flow-control.md). "lroom"/"kroom": each limited queue's and candidate key's free
-- slots; the spent lapsed claims were buried already (take_spent). A fair queue
-- (migration 0011) also has each key's first :limit due jobs ("fkeys": one index probe
-- per key; "fcand"), ordered by their fair tags (as PostgreSQL's limited_picks:
-- start + (n - 1) / share, "fstart"); fair_advance moves the passes after the claim.
WITH RECURSIVE lim AS (
  SELECT lq.name, lq.max_claimed, lq.key_limits, lq.rate_limits AS rl,
         lq.fair_shares AS fs, COALESCE(lq.fair_pass, '{}') AS fp,
         COALESCE(lq.fair_vtime, 0) AS vt
  FROM {queues} lq
  WHERE lq.name IN (SELECT value FROM json_each(:queues)) AND {has_limit}
),
lscan AS (
  SELECT j.id, j.queue, j.limit_key, j.priority, j.run_at, {revoked} AS revoked,
         l.key_limits, l.rl
  FROM lim l CROSS JOIN {jobs} j  -- lim drives (CROSS JOIN keeps it outer): no limited
  WHERE j.queue = l.name          -- queue, no scan of the jobs
    AND {active_queues} AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
    AND attempts < max_attempts
  ORDER BY priority DESC, run_at, id
  LIMIT CASE WHEN {per_key} THEN max(:limit, {limit_scan}) ELSE :limit END
),
fkeys (queue, k) AS (
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
fcand AS (
  SELECT j.id, j.queue, j.limit_key, j.priority, j.run_at, {revoked} AS revoked,
         l.key_limits, l.rl
  FROM fkeys f JOIN lim l ON l.name = f.queue CROSS JOIN {jobs} j
  WHERE f.k IS NOT NULL AND j.id IN (
    SELECT x.id FROM {jobs} x
    WHERE x.queue = f.queue AND x.limit_key = f.k AND x.run_at <= :now
      AND (x.expires_at IS NULL OR x.expires_at > :now) AND x.attempts < x.max_attempts
      AND x.queue NOT IN (SELECT queue FROM {paused_queues})
    ORDER BY x.priority DESC, x.run_at, x.id
    LIMIT :limit)
),
lcand AS (SELECT * FROM lscan UNION SELECT * FROM fcand),
fstart AS (
  SELECT g.queue, g.gk,
         max(COALESCE((SELECT e.value FROM json_each(l.fp) e WHERE e.key = g.gk), 0),
             l.vt) AS start,
         1.0 * COALESCE(
           (SELECT e.value FROM json_each(l.fs) e WHERE e.key = g.gk AND g.gk <> ''),
           (SELECT e.value FROM json_each(l.fs) e WHERE e.key = '*'), 1) AS share
  FROM (SELECT DISTINCT c.queue, COALESCE(c.limit_key, '') AS gk FROM lcand c) g
  JOIN lim l ON l.name = g.queue AND l.fs IS NOT NULL
),
lroom AS (
  SELECT l.name, l.max_claimed - (
    SELECT count(*) FROM {jobs} x
    WHERE x.queue = l.name AND x.state = 'processing' AND x.deadline > :now) AS room
  FROM lim l WHERE l.max_claimed IS NOT NULL
),
kroom AS (
  SELECT k.queue, k.limit_key, k.cap - (
    SELECT count(*) FROM {jobs} x
    WHERE x.queue = k.queue AND x.limit_key = k.limit_key AND x.state = 'processing'
      AND x.deadline > :now) AS room
  FROM (
    SELECT DISTINCT c.queue, c.limit_key, COALESCE(
      (SELECT e.value FROM json_each(c.key_limits) e WHERE e.key = c.limit_key),
      (SELECT e.value FROM json_each(c.key_limits) e WHERE e.key = '*')) AS cap
    FROM lcand c WHERE c.key_limits IS NOT NULL AND c.limit_key IS NOT NULL
  ) k
  WHERE k.cap IS NOT NULL
),
rroom AS (  -- the window's use from the ordinals (migration 14): two probes, no count
  SELECT l.name, json_extract(e.value, '$[0]') - COALESCE(
    (SELECT x.n FROM {claim_log} x WHERE x.queue = l.name ORDER BY x.at DESC, x.n DESC LIMIT 1)
    - (SELECT x.n FROM {claim_log} x
       WHERE x.queue = l.name AND x.at > :now - json_extract(e.value, '$[1]')
       ORDER BY x.at, x.n LIMIT 1) + 1, 0) AS room
  FROM lim l, json_each(l.rl) e WHERE l.rl IS NOT NULL AND e.key = ''
),
krate AS (
  SELECT k.queue, k.limit_key, json_extract(k.r, '$[0]') - COALESCE(
    (SELECT x.kn FROM {claim_log} x WHERE x.queue = k.queue AND x.limit_key = k.limit_key
     ORDER BY x.at DESC, x.kn DESC LIMIT 1)
    - (SELECT x.kn FROM {claim_log} x
       WHERE x.queue = k.queue AND x.limit_key = k.limit_key
         AND x.at > :now - json_extract(k.r, '$[1]')
       ORDER BY x.at, x.kn LIMIT 1) + 1, 0) AS room
  FROM (
    SELECT DISTINCT c.queue, c.limit_key, COALESCE(
      (SELECT e.value FROM json_each(c.rl) e WHERE e.key = c.limit_key),
      (SELECT e.value FROM json_each(c.rl) e WHERE e.key = '*')) AS r
    FROM lcand c WHERE c.rl IS NOT NULL AND c.limit_key IS NOT NULL
  ) k
  WHERE k.r IS NOT NULL
),
tagged AS (
  SELECT k.*, CASE WHEN f.share IS NULL THEN 0.0
                   ELSE f.start + (k.kn - 1) / f.share END AS s
  FROM (
    SELECT c.*, {least_room} AS key_room,
           row_number() OVER (PARTITION BY c.queue, c.limit_key
                              ORDER BY c.priority DESC, c.run_at, c.id) AS kn
    FROM lcand c LEFT JOIN kroom u ON u.queue = c.queue AND u.limit_key = c.limit_key
    LEFT JOIN krate v ON v.queue = c.queue AND v.limit_key = c.limit_key
  ) k LEFT JOIN fstart f ON f.queue = k.queue AND f.gk = COALESCE(k.limit_key, '')
  WHERE k.key_room IS NULL OR k.kn <= k.key_room
),
qranked AS (
  SELECT t.*,
         row_number() OVER (PARTITION BY t.queue
                            ORDER BY t.priority DESC, t.s, t.run_at, t.id) AS qn,
         row_number() OVER (PARTITION BY t.queue
                            ORDER BY t.priority DESC, t.run_at, t.id) AS cn
  FROM tagged t
),
lpick AS (
  -- run_at: a fair queue's i-th pick competes across queues with its i-th due time
  SELECT r.id, r.revoked, r.priority, e.run_at, r.s
  FROM qranked r JOIN qranked e ON e.queue = r.queue AND e.cn = r.qn
  LEFT JOIN lroom u ON u.name = r.queue LEFT JOIN rroom v ON v.name = r.queue
  WHERE {least_room} IS NULL OR r.qn <= {least_room}
),
free AS (  -- the queues without a limit: the limited ones left out of the IN list (a
  -- filter after it read every due job of a limited queue, to drop them all)
  SELECT id, {revoked} AS revoked, priority, run_at, 0.0 AS s
  FROM {jobs} j
  WHERE queue IN ({active_names} AND value NOT IN (SELECT name FROM lim))
    AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
    AND attempts < max_attempts
  ORDER BY priority DESC, run_at, id
  LIMIT :limit
)
SELECT id, revoked FROM (SELECT * FROM free UNION ALL SELECT * FROM lpick)
ORDER BY priority DESC, run_at, s, id
LIMIT :limit

-- name: fair_advance
-- After a claim of fair queues: each group's pass moves by what it took over its share
-- (from greatest(pass, vtime), as claim_pick_limited's fstart), the queue's vtime to the
-- largest tag taken, and the passes not ahead of it are forgotten.
WITH took AS (
  SELECT j.queue, COALESCE(j.limit_key, '') AS gk, count(*) AS n FROM {jobs} j
  JOIN {queues} lq ON lq.name = j.queue AND lq.fair_shares IS NOT NULL
  WHERE j.id IN (SELECT value FROM json_each(:ids))
  GROUP BY j.queue, COALESCE(j.limit_key, '')
),
g AS (
  SELECT t.queue, t.gk, t.n, COALESCE(lq.fair_vtime, 0) AS vt,
         max(COALESCE((SELECT e.value FROM json_each(COALESCE(lq.fair_pass, '{}')) e
                       WHERE e.key = t.gk), 0), COALESCE(lq.fair_vtime, 0)) AS start,
         1.0 * COALESCE(
           (SELECT e.value FROM json_each(lq.fair_shares) e WHERE e.key = t.gk AND t.gk <> ''),
           (SELECT e.value FROM json_each(lq.fair_shares) e WHERE e.key = '*'), 1) AS share
  FROM took t JOIN {queues} lq ON lq.name = t.queue
),
v AS (
  SELECT g.queue, max(max(g.start + (g.n - 1) / g.share), max(g.vt)) AS vt
  FROM g GROUP BY g.queue
)
UPDATE {queues} SET
  fair_vtime = (SELECT v.vt FROM v WHERE v.queue = {queues}.name),
  fair_pass = (
    SELECT json_group_object(e.gk, e.pass) FROM (
      SELECT o.key AS gk, o.value AS pass
      FROM json_each(COALESCE({queues}.fair_pass, '{}')) o
      WHERE o.key NOT IN (SELECT g.gk FROM g WHERE g.queue = {queues}.name)
      UNION ALL
      SELECT g.gk, g.start + g.n / g.share FROM g WHERE g.queue = {queues}.name
    ) e
    WHERE e.pass > (SELECT v.vt FROM v WHERE v.queue = {queues}.name))
WHERE name IN (SELECT queue FROM v)

-- fragment: least_room
-- The smaller of the free places u.room (concurrency) and v.room (rate), either NULL
-- (no such limit): SQLite's min() of a NULL is NULL.
COALESCE(min(u.room, v.room), u.room, v.room)

-- name: claim
-- The candidates (:ids) claimed: a Delivery's fields (revoked: from claim_pick).
UPDATE {jobs}
SET state = 'processing', attempts = attempts + 1, token = random(),
    deadline = :now + visibility_timeout, run_at = :now + visibility_timeout,
    -- a key held only while waiting (unique_claimed 0) is free once claimed
    unique_key = CASE WHEN unique_claimed THEN unique_key END
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, token, queue, body, priority, attempts, max_attempts, backoff_base, deadline,
          msg_id, visibility_timeout

-- name: size
SELECT count(*) AS size FROM {jobs} WHERE queue = :queue AND state = 'pending'

-- name: next_due
-- min(run_at) of the pending jobs, by a loose index scan of the claim index: one
-- seek per priority present in each queue, not a scan of every pending row. A throttled
-- queue (rate_wait ahead, migration 0010): its due jobs at rate_wait, a delayed one at
-- its own time (a rate never makes a job early, nor a delayed one late): "later", each
-- priority's first pending job not yet due, looked for only then (one seek each).
WITH RECURSIVE prio(queue, p) AS (
  SELECT qn.value, (SELECT priority FROM {jobs} WHERE queue = qn.value
                    ORDER BY priority DESC LIMIT 1)
  FROM ({active_names}) AS qn
  WHERE qn.value NOT IN ({full_queues})  -- due again when a claim ends (a wake-up)
  UNION ALL
  SELECT prio.queue, (SELECT j.priority FROM {jobs} j WHERE j.queue = prio.queue
                      AND j.priority < prio.p ORDER BY j.priority DESC LIMIT 1)
  FROM prio WHERE prio.p IS NOT NULL
)
SELECT min(CASE WHEN f.run_at IS NULL OR NOT COALESCE(w.rate_wait > :now, 0) THEN f.run_at
                ELSE COALESCE(min(w.rate_wait, f.later), w.rate_wait)
           END) AS next_at
FROM (
  SELECT prio.queue, min((SELECT j.run_at FROM {jobs} j
              WHERE j.queue = prio.queue AND j.priority = prio.p AND j.state = 'pending'
                AND (j.expires_at IS NULL OR j.expires_at > :now)
              ORDER BY j.run_at LIMIT 1)) AS run_at,
         min(CASE WHEN EXISTS (SELECT 1 FROM {queues} t
                               WHERE t.name = prio.queue AND t.rate_wait > :now) THEN (
               SELECT j.run_at FROM {jobs} j
               WHERE j.queue = prio.queue AND j.priority = prio.p AND j.state = 'pending'
                 AND j.run_at > :now AND (j.expires_at IS NULL OR j.expires_at > :now)
               ORDER BY j.run_at LIMIT 1) END) AS later
  FROM prio WHERE prio.p IS NOT NULL GROUP BY prio.queue
) f LEFT JOIN {queues} w ON w.name = f.queue


-- name: ack
DELETE FROM {jobs} WHERE {held} RETURNING id

-- name: heartbeat
UPDATE {jobs}
SET deadline = :now + COALESCE(:extend, visibility_timeout),
    run_at = :now + COALESCE(:extend, visibility_timeout)
WHERE {held} RETURNING id

-- name: pend
-- A held job back to pending, due at :run_at, :refund attempts given back.
UPDATE {jobs}
SET state = 'pending', token = NULL, deadline = NULL, run_at = :run_at,
    attempts = attempts - :refund
WHERE {held} RETURNING id

-- name: take_held
-- Held jobs out of the queue (to "bury").
DELETE FROM {jobs} WHERE {held} RETURNING {dead_columns}

-- name: expire_bury
-- Maintenance: the jobs of values.MAINTENANCE_JOBS, each run in one write transaction.
-- (SQLite has no data-modifying CTEs: a job that moves rows copies them, then deletes
-- them, with the same :now; its counts are the statements' row counts.)
-- expire: the expired jobs of task queues, copied to the dead letters ("count").
-- Each job takes at most :batch rows per run, the same ones in both its statements
-- (lowest ids first, one write transaction); one that took :batch runs again.
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
SELECT {dead_columns}, :now, 'expired' FROM {jobs} j
WHERE j.id IN (SELECT id FROM {jobs} WHERE {expired} ORDER BY id LIMIT :batch)
  AND NOT EXISTS (SELECT 1 FROM {queues} q WHERE q.name = j.queue AND {transient})

-- name: expire_delete
-- expire: every expired job leaves the queue (less those buried: "dropped").
DELETE FROM {jobs} WHERE id IN (SELECT id FROM {jobs} WHERE {expired} ORDER BY id LIMIT :batch)

-- name: lapsed_bury
-- lapsed: the spent lapsed claims, copied to the dead letters, as a claim would bury
-- them (for queues no one consumes). "+id": ordered by id, the planner walked the
-- whole table in rowid order; the claims in flight (jobs_processing) are few.
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
SELECT {dead_columns}, :now, 'attempts exhausted' FROM {jobs}
WHERE id IN (SELECT id FROM {jobs} WHERE {lapsed} ORDER BY +id LIMIT :batch)

-- name: lapsed_delete
DELETE FROM {jobs} WHERE id IN (SELECT id FROM {jobs} WHERE {lapsed} ORDER BY +id LIMIT :batch)

-- name: retention
-- retention: dead letters past their queue's retention (else the store's).
-- With no retention anywhere (the default) nothing is scanned; else only letters older
-- than the shortest retention get their queue's looked up.
DELETE FROM {dead}
WHERE id IN (
  SELECT d.id FROM {dead} d
  WHERE (:retention IS NOT NULL
         OR EXISTS (SELECT 1 FROM {queues} WHERE dead_letter_retention IS NOT NULL))
    AND d.died_at < :now - (
      SELECT min(r) FROM (
        SELECT dead_letter_retention AS r FROM {queues} WHERE dead_letter_retention IS NOT NULL
        UNION ALL SELECT :retention))
    AND d.died_at < :now - COALESCE(
      (SELECT dead_letter_retention FROM {queues} q WHERE q.name = d.queue), :retention)
  LIMIT :batch)

-- name: expired_queues
-- expired_queues: queues unused past their x-expires (at least the grace).
DELETE FROM {queues} WHERE expires IS NOT NULL AND last_used + max(expires, :grace) < :now
RETURNING name

-- name: expired_queues_bindings
-- ... their bindings (:names, JSON) ...
DELETE FROM {bindings} WHERE queue IN (SELECT value FROM json_each(:names))

-- name: expired_queues_jobs
-- ... and their jobs ...
DELETE FROM {jobs} WHERE queue IN (SELECT value FROM json_each(:names))

-- name: expired_queues_rates
-- ... and their counts (transient queues are named anew by every process).
DELETE FROM {rates} WHERE queue IN (SELECT value FROM json_each(:names))


-- name: get_job_by_id
SELECT {job_read} FROM {jobs} WHERE id = :id
UNION ALL SELECT {dead_read} FROM {dead} WHERE id = :id

-- name: get_job_by_msg
SELECT * FROM (SELECT {job_read} FROM {jobs} WHERE msg_id = :id ORDER BY id DESC LIMIT 1)
UNION ALL
SELECT * FROM (SELECT {dead_read} FROM {dead} WHERE msg_id = :id
               ORDER BY died_at DESC LIMIT 1)
LIMIT 1

-- name: counts
-- QueueCounts(**row) of :queues (JSON; NULL: every queue with jobs or dead letters).
WITH wanted AS (SELECT value AS queue FROM json_each(:queues)),
live AS (
  SELECT queue,
         sum(state = 'pending' AND run_at <= :now) AS pending,
         sum(state = 'pending' AND run_at > :now) AS delayed,
         sum(state = 'processing') AS processing,
         :now - min(CASE WHEN state = 'pending' AND run_at <= :now THEN created_at END) AS age
  FROM {jobs} WHERE :queues IS NULL OR queue IN (SELECT queue FROM wanted)
  GROUP BY queue
),
dl AS (
  SELECT queue, count(*) AS dead FROM {dead}
  WHERE :queues IS NULL OR queue IN (SELECT queue FROM wanted) GROUP BY queue
),
names AS (SELECT queue FROM live UNION SELECT queue FROM dl UNION SELECT queue FROM wanted)
SELECT n.queue, COALESCE(live.pending, 0) AS pending, COALESCE(live.delayed, 0) AS delayed,
       COALESCE(live.processing, 0) AS processing, COALESCE(dl.dead, 0) AS dead,
       live.age AS oldest_age
FROM names n LEFT JOIN live ON live.queue = n.queue LEFT JOIN dl ON dl.queue = n.queue
ORDER BY n.queue

-- name: purge
-- The jobs purged (for the act, store/acts.py).
DELETE FROM {jobs} WHERE queue = :queue AND state = 'pending' RETURNING id, queue

-- name: scheduled
SELECT {job_read} FROM {jobs}
WHERE state = 'pending' AND run_at > :now AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at, id LIMIT :limit

-- name: peek
SELECT {job_read} FROM {jobs}
WHERE queue = :queue AND state = 'pending'
ORDER BY priority DESC, run_at, id LIMIT :limit

-- name: revoke
-- Writes {revokes} only: no job row is written (see the PostgreSQL statement).
INSERT OR IGNORE INTO {revokes} (msg_id, revoked_at)
SELECT DISTINCT msg_id, :now FROM {jobs} WHERE msg_id IN (SELECT value FROM json_each(:ids))

-- name: revoked_among
SELECT j.id FROM {jobs} j WHERE j.id IN (SELECT value FROM json_each(:job_ids)) AND {revoked}

-- name: revokes_gone
-- Revokes go once no job of their task is left.
DELETE FROM {revokes}
WHERE msg_id IN (
  SELECT r.msg_id FROM {revokes} r
  WHERE NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.msg_id = r.msg_id)
  LIMIT :batch)

-- name: claim_stats
-- ClaimStat(**row): the claims held per queue (no hand-off offers on SQLite).
WITH p AS (
  SELECT queue, count(*) AS n, min(created_at) AS oldest, min(deadline) AS deadline
  FROM {jobs} WHERE state = 'processing' GROUP BY queue
)
SELECT queue, n AS processing, oldest AS oldest_created, deadline AS next_deadline,
       0 AS offers, 0 AS offered_slots
FROM p ORDER BY queue


-- name: dead_list
SELECT {dead_read} FROM {dead} WHERE :queue IS NULL OR queue = :queue
ORDER BY died_at DESC, id DESC LIMIT :limit

-- name: dead_requeue
-- Dead letters back to their queue, due now, attempts reset (then dead_purge).
INSERT INTO {jobs} (queue, {requeued_columns})
SELECT queue, id, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base,
       created_at, :now, 0
FROM {dead} WHERE {dead_pick}

-- name: dead_purge
-- The dead letters deleted (for the act, store/acts.py).
DELETE FROM {dead} WHERE {dead_pick} RETURNING id, queue

-- name: dead_move_copy
-- Dead letters (:ids) to another queue (:to), due now, attempts reset (then
-- dead_move_delete).
INSERT INTO {jobs} (queue, {requeued_columns})
SELECT :to, id, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base,
       created_at, :now, 0
FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids))

-- name: dead_move_delete
-- The dead letters moved, by the queue they came from (for the act, store/acts.py).
DELETE FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id, queue

-- name: dead_explain
UPDATE {dead} SET last_error = :error WHERE msg_id = :msg_id AND last_error = :was

-- name: dead_search
SELECT {dead_read} FROM {dead}
WHERE {dead_filter} AND {dead_before}
ORDER BY died_at DESC, id DESC LIMIT :limit

-- name: dead_search_window
SELECT {dead_read} FROM (
  SELECT * FROM {dead} WHERE {dead_before}
  ORDER BY died_at DESC, id DESC LIMIT :scan
)
WHERE {dead_filter}
ORDER BY died_at DESC, id DESC LIMIT :limit

-- name: dead_window
-- The last row of a window, if any row follows it (else the search is complete).
SELECT died_at, id FROM {dead} WHERE {dead_before}
ORDER BY died_at DESC, id DESC LIMIT 2 OFFSET :scan - 1

-- name: dead_count
SELECT count(*) AS n FROM (SELECT 1 FROM {dead} WHERE {dead_filter} LIMIT coalesce(:cap, -1))

-- name: dead_ids
SELECT id FROM {dead} WHERE {dead_filter} AND id > :after ORDER BY id LIMIT :limit


-- name: rates_add
-- :rows is [[queue, minute, published, acked], ...] (JSON).
INSERT INTO {rates} (queue, minute, published, acked)
SELECT value->>0, value->>1, sum(value->>2), sum(value->>3) FROM json_each(:rows)
GROUP BY value->>0, value->>1
ON CONFLICT (queue, minute) DO UPDATE
SET published = published + excluded.published, acked = acked + excluded.acked

-- name: rates_since
SELECT queue, minute, published, acked FROM {rates}
WHERE minute >= :since AND minute > 0 ORDER BY minute, queue

-- name: rates_totals
SELECT queue, minute, published, acked FROM {rates} WHERE minute = :total ORDER BY queue

-- name: rates_trim
DELETE FROM {rates} WHERE minute < :before AND minute > 0


-- name: bump_routing
-- Exchanges or bindings changed: a new routing version (for the routing caches).
UPDATE {meta} SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routing_version'

-- name: routing_version
SELECT value FROM {meta} WHERE key = 'routing_version'

-- name: exchange_declare
INSERT INTO {exchanges} (name, type) VALUES (:name, :type)
ON CONFLICT (name) DO UPDATE SET type = excluded.type WHERE {exchanges}.type != excluded.type

-- name: exchange_type
SELECT type FROM {exchanges} WHERE name = :name

-- name: exchange_delete
DELETE FROM {exchanges} WHERE name = :name

-- name: exchange_unbind
DELETE FROM {bindings} WHERE exchange = :name

-- name: bind
INSERT INTO {bindings} (exchange, routing_key, queue) VALUES (:exchange, :rk, :queue)
ON CONFLICT DO NOTHING

-- name: unbind
DELETE FROM {bindings} WHERE exchange = :exchange AND routing_key = :rk AND queue = :queue

-- name: bindings
SELECT routing_key, queue FROM {bindings} WHERE exchange = :exchange

-- name: queue_declare
INSERT INTO {queues} (name, message_ttl, expires, last_used) VALUES (:name, :ttl, :expires, :now)
ON CONFLICT (name) DO UPDATE SET message_ttl = excluded.message_ttl,
  expires = excluded.expires, last_used = excluded.last_used

-- name: queue_exists
SELECT 1 AS found FROM {queues} WHERE name = :name

-- name: queue_delete_row
DELETE FROM {queues} WHERE name = :name

-- name: queue_delete_bindings
DELETE FROM {bindings} WHERE queue = :name

-- name: queue_delete_jobs
DELETE FROM {jobs} WHERE queue = :name

-- name: queue_delete_rates
DELETE FROM {rates} WHERE queue = :name

-- name: touch_queues
UPDATE {queues} SET last_used = :now WHERE name IN (SELECT value FROM json_each(:names))
RETURNING name


-- name: lease_acquire
INSERT INTO {leases} (name, owner, expires_at) VALUES (:name, :owner, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE {leases}.owner = excluded.owner OR {leases}.expires_at <= :now
RETURNING owner

-- name: lease_release
DELETE FROM {leases} WHERE name = :name AND owner = :owner

-- name: lease_holder
SELECT owner FROM {leases} WHERE name = :name AND expires_at > :now


-- name: schedule_upsert
-- Beat schedules. An upsert keeps the lifecycle columns (enabled, last run, run count,
-- last error, a pending run-now) and, with "keep", the stored next_at while the kind,
-- spec and time zone are unchanged (the grid survives restarts and other edits).
INSERT INTO {schedules} (name, spec, interval, task, args, kwargs, options, next_at, origin,
                          kind, tz, updated_at)
VALUES (:name, :spec, :interval, :task, :args, :kwargs, :options,
        :next_at, :origin, :kind, :tz, :now)
ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, interval = excluded.interval,
  task = excluded.task, args = excluded.args, kwargs = excluded.kwargs,
  origin = excluded.origin, updated_at = excluded.updated_at,
  kind = excluded.kind, tz = excluded.tz,
  -- The beat's own state in the options object (alkstore_state) is kept.
  options = CASE WHEN instr({schedules}.options, '"alkstore_state"') = 0 THEN excluded.options
                 ELSE json_set(excluded.options, '$.alkstore_state',
                               json(json_extract({schedules}.options, '$.alkstore_state')))
            END,
  next_at = CASE WHEN :keep AND ({schedules}.kind, {schedules}.spec, {schedules}.tz)
                                 = (excluded.kind, excluded.spec, excluded.tz)
                 THEN {schedules}.next_at ELSE excluded.next_at END

-- name: schedule_delete
DELETE FROM {schedules} WHERE name = :name

-- name: schedule_list
SELECT {schedule_columns} FROM {schedules} ORDER BY name

-- name: schedule_get
SELECT {schedule_columns} FROM {schedules} WHERE name = :name

-- name: schedule_clock
-- The clock "due" is measured against: a SQLite file's is its host's (every process
-- on the file shares that host), so this is that host's time.
SELECT :now AS now

-- name: schedule_due
-- (The tick's BEGIN IMMEDIATE is the row lock: no other ticker runs meanwhile.)
SELECT {schedule_columns} FROM {schedules}
WHERE (enabled AND next_at <= :now) OR run_requested IS NOT NULL
ORDER BY next_at, name

-- name: schedule_advance
-- One boundary fired: the next one, guarded by the one fired (a second ticker's
-- advance of the same boundary matches no row).
UPDATE {schedules} SET next_at = :new, last_run_at = :now, run_count = run_count + 1,
  last_error = NULL
WHERE name = :name AND next_at = :prev

-- name: schedule_skip
-- Missed boundaries beyond the catch-up limit: skipped, not counted as runs.
UPDATE {schedules} SET next_at = :new WHERE name = :name AND next_at = :prev

-- name: schedule_skip_busy
-- No stacking: due times skipped while the previous run is live, counted in the options
-- object's alkstore_state.skipped; guarded by the boundary as an advance is.
UPDATE {schedules} SET next_at = :new,
  options = json_set(options, '$.alkstore_state',
    json_set(COALESCE(json_extract(options, '$.alkstore_state'), '{}'), '$.skipped',
             COALESCE(json_extract(options, '$.alkstore_state.skipped'), 0) + :count))
WHERE name = :name AND next_at = :prev

-- name: schedule_set_job
-- No stacking: the job id (primary key) of the schedule's last run.
UPDATE {schedules} SET options = json_set(options, '$.alkstore_state',
    json_set(COALESCE(json_extract(options, '$.alkstore_state'), '{}'), '$.job', :job))
WHERE name = :name

-- name: schedule_job_floor
-- The highest job id before a fire's publish (a primary-key read).
SELECT COALESCE(max(id), 0) AS id FROM {jobs}

-- name: schedule_job_since
-- The job a fire just published: ids above the floor only (a primary-key range).
SELECT id FROM {jobs} WHERE id > :floor AND msg_id = :msg ORDER BY id DESC LIMIT 1

-- name: schedule_job_live
-- Whether the job is still queued, delayed or claimed (a primary-key read).
SELECT count(*) AS n FROM {jobs} WHERE id = :id

-- name: schedule_ran_now
UPDATE {schedules} SET run_requested = NULL, last_run_at = :now,
  run_count = run_count + 1, last_error = NULL
WHERE name = :name AND run_requested = :requested

-- name: schedule_failed
UPDATE {schedules} SET last_error = :error WHERE name = :name

-- name: schedule_savepoint
-- One schedule's fire inside a tick (ScheduleTick.savepoint): its failure undoes it alone.
SAVEPOINT alkstore_fire

-- name: schedule_savepoint_undo
ROLLBACK TO SAVEPOINT alkstore_fire

-- name: schedule_savepoint_release
RELEASE SAVEPOINT alkstore_fire

-- name: schedule_run_now
UPDATE {schedules} SET run_requested = COALESCE(run_requested, :now) WHERE name = :name

-- name: schedule_disable
UPDATE {schedules} SET enabled = false WHERE name = :name

-- name: schedule_enable
-- Re-enabled: the next boundary on the same grid after now (computed by the caller).
UPDATE {schedules} SET enabled = true, next_at = :new
WHERE name = :name AND next_at = :prev


-- name: queue_pause
INSERT INTO {paused_queues} (queue, paused_at) VALUES (:name, :now)
ON CONFLICT (queue) DO NOTHING RETURNING queue

-- name: queue_resume
-- The commit changes data_version, which wakes every waiter on the file.
DELETE FROM {paused_queues} WHERE queue = :name RETURNING queue

-- name: paused_list
SELECT queue, paused_at FROM {paused_queues} ORDER BY queue


-- Concurrency limits (migration 0007, store/limits.py, docs/flow-control.md).

-- name: limit_set
-- The limit of a queue (key NULL) or of one key of it (the key "*": every key without
-- its own), the queue's row made if it has none (a queue declared later keeps it).
INSERT INTO {queues} AS q (name, last_used, max_claimed, key_limits)
VALUES (:queue, :now, CASE WHEN :key IS NULL THEN :n END,
        CASE WHEN :key IS NOT NULL THEN json_object(:key, :n) END)
ON CONFLICT (name) DO UPDATE SET
  max_claimed = CASE WHEN :key IS NULL THEN :n ELSE q.max_claimed END,
  key_limits = CASE WHEN :key IS NULL THEN q.key_limits
                    ELSE json_patch(COALESCE(q.key_limits, '{}'), json_object(:key, :n)) END
RETURNING name

-- name: limit_clear
-- No limit any more on the queue (key NULL) or on one key of it.
UPDATE {queues} SET
  max_claimed = CASE WHEN :key IS NULL THEN NULL ELSE max_claimed END,
  key_limits = CASE WHEN :key IS NULL THEN key_limits
                    ELSE NULLIF(json_patch(COALESCE(key_limits, '{}'),
                                           json_object(:key, json('null'))), '{}') END
WHERE name = :queue
RETURNING name

-- name: limits_list
-- Every queue with a limit and its live claims (QueueLimit rows, store/limits.py).
SELECT lq.name AS queue, lq.max_claimed, lq.key_limits, lq.rate_limits, lq.rate_wait,
       lq.rate_throttles, lq.fair_shares,
       (SELECT count(*) FROM {jobs} j
        WHERE j.queue = lq.name AND j.state = 'processing' AND j.deadline > :now) AS used
FROM {queues} lq WHERE {has_limit} ORDER BY lq.name

-- name: limit_keys_used
-- The live claims per key of the queues with per-key limits.
SELECT j.queue, j.limit_key, count(*) AS used
FROM {jobs} j JOIN {queues} lq ON lq.name = j.queue AND lq.key_limits IS NOT NULL
WHERE j.state = 'processing' AND j.deadline > :now AND j.limit_key IS NOT NULL
GROUP BY j.queue, j.limit_key ORDER BY j.queue, j.limit_key

-- name: horizon_holders
-- SQLite keeps no old row versions: nothing holds them (store/health.py).
SELECT NULL AS kind, NULL AS holder, NULL AS state, NULL AS app, NULL AS role,
       NULL AS age, NULL AS xids
WHERE 0

-- name: table_health
-- No dead row versions to report (a deleted row's page is reused at once).
SELECT NULL AS "table", NULL AS live, NULL AS dead, NULL AS bytes, NULL AS vacuumed_at,
       NULL AS autovacuum
WHERE 0

-- name: jobs_grown
-- SQLite plans without the table's size (no sqlite_stat1 is kept): nothing to refresh
-- (store/planner.py).
SELECT 0 AS grown

-- name: jobs_analyze
-- Never run (jobs_grown is false): gathering statistics would change SQLite's plans.
SELECT 1

-- name: rotate_generation
-- SQLite's jobs is one table: a deleted row's space is free at once (store/generations.py).
SELECT 'off' AS outcome, 0 AS moved

-- name: offers_closed
-- SQLite hands nothing off through a table: there is no gate to reopen.
SELECT 0 AS closed

-- name: offers_vacuum
-- Never run (offers_closed is never true here).
SELECT 1


-- Rate limits (migration 0010, store/rates.py, docs/flow-control.md "Rate limits").

-- name: rate_set
-- The rate of a queue (key NULL: stored under "") or of one key of it ("*": every key
-- without its own): [N, P], at most N claims in any P seconds. The queue's row is made
-- if it has none; its rate_wait is forgotten (the new rate may allow a claim now).
INSERT INTO {queues} AS q (name, last_used, rate_limits)
VALUES (:queue, :now, json_object(COALESCE(:key, ''), json_array(:n, :per)))
ON CONFLICT (name) DO UPDATE SET
  rate_limits = json_patch(COALESCE(q.rate_limits, '{}'),
                           json_object(COALESCE(:key, ''), json_array(:n, :per))),
  rate_wait = NULL
RETURNING name

-- name: rate_clear
-- No rate any more on the queue (key NULL) or on one key of it.
UPDATE {queues} SET
  rate_limits = NULLIF(json_patch(COALESCE(rate_limits, '{}'),
                                  json_object(COALESCE(:key, ''), json('null'))), '{}'),
  rate_wait = NULL
WHERE name = :queue
RETURNING name

-- name: rate_forget
-- The claims logged for a queue left without a rate.
DELETE FROM {claim_log} WHERE queue = :queue
  AND NOT EXISTS (SELECT 1 FROM {queues} lq WHERE lq.name = :queue
                  AND lq.rate_limits IS NOT NULL)
RETURNING queue

-- name: rate_log
-- The claims just made (:ids) of queues with a rate, at :now (the write lock's time),
-- and the claims older than every period of their queue forgotten.
INSERT INTO {claim_log} (queue, limit_key, at)
SELECT j.queue, j.limit_key, :now FROM {jobs} j
JOIN {queues} lq ON lq.name = j.queue AND lq.rate_limits IS NOT NULL
WHERE j.id IN (SELECT value FROM json_each(:ids))

-- name: rate_trim
-- Each queue's cutoff first, then a range of claim_log_order per queue (a cutoff
-- computed per row read every row of the queue's log).
DELETE FROM {claim_log} WHERE rowid IN (
  SELECT x.rowid FROM (
    SELECT lq.name, :now - max(json_extract(e.value, '$[1]')) AS cutoff
    FROM {queues} lq, json_each(lq.rate_limits) e
    WHERE lq.name IN (SELECT value FROM json_each(:queues)) GROUP BY lq.name
  ) c CROSS JOIN {claim_log} x
  WHERE x.queue = c.name AND x.at <= c.cutoff
)

-- name: rate_wait_set
-- After a claim of queues with a rate: when every due job it left (the first :limit, or
-- limit_scan where a queue limits its keys, as the claim looks at) is refused by a rate,
-- rate_wait is the time the first of them may be claimed (a window's oldest claim + its
-- period), else NULL; written only on a change (a write wakes every waiter on the file).
WITH lim AS (
  SELECT lq.name, lq.rate_limits AS rl, lq.key_limits, lq.fair_shares AS fs FROM {queues} lq
  WHERE lq.name IN (SELECT value FROM json_each(:queues)) AND lq.rate_limits IS NOT NULL
),
rest AS (
  SELECT j.queue, j.limit_key, l.rl FROM lim l CROSS JOIN {jobs} j
  WHERE j.queue = l.name AND {active_queues} AND j.run_at <= :now
    AND (j.expires_at IS NULL OR j.expires_at > :now) AND j.attempts < j.max_attempts
  ORDER BY j.priority DESC, j.run_at, j.id
  LIMIT CASE WHEN {per_key} THEN max(:limit, {limit_scan}) ELSE :limit END
),
qrate AS (
  SELECT l.name AS queue, json_extract(e.value, '$[0]') AS cap,
         json_extract(e.value, '$[1]') AS per
  FROM lim l, json_each(l.rl) e WHERE e.key = ''
),
krate AS (
  SELECT k.queue, k.limit_key, json_extract(k.r, '$[0]') AS cap,
         json_extract(k.r, '$[1]') AS per
  FROM (
    SELECT DISTINCT r.queue, r.limit_key, COALESCE(
      (SELECT e.value FROM json_each(r.rl) e WHERE e.key = r.limit_key),
      (SELECT e.value FROM json_each(r.rl) e WHERE e.key = '*')) AS r
    FROM rest r WHERE r.limit_key IS NOT NULL
  ) k
  WHERE k.r IS NOT NULL
),
qfree AS (  -- a full window (its use from the ordinals, as the claim reads it): when it frees
  SELECT q.queue,
         CASE WHEN (SELECT x.n FROM {claim_log} x WHERE x.queue = q.queue
                    ORDER BY x.at DESC, x.n DESC LIMIT 1)
                   - (SELECT x.n FROM {claim_log} x WHERE x.queue = q.queue
                      AND x.at > :now - q.per ORDER BY x.at, x.n LIMIT 1) + 1 >= q.cap
              THEN (SELECT x.at FROM {claim_log} x WHERE x.queue = q.queue
                    AND x.at > :now - q.per ORDER BY x.at, x.n LIMIT 1) + q.per END AS free
  FROM qrate q
),
kfree AS (
  SELECT k.queue, k.limit_key,
         CASE WHEN (SELECT x.kn FROM {claim_log} x
                    WHERE x.queue = k.queue AND x.limit_key = k.limit_key
                    ORDER BY x.at DESC, x.kn DESC LIMIT 1)
                   - (SELECT x.kn FROM {claim_log} x
                      WHERE x.queue = k.queue AND x.limit_key = k.limit_key
                        AND x.at > :now - k.per ORDER BY x.at, x.kn LIMIT 1) + 1 >= k.cap
              THEN (SELECT x.at FROM {claim_log} x
                    WHERE x.queue = k.queue AND x.limit_key = k.limit_key
                      AND x.at > :now - k.per ORDER BY x.at, x.kn LIMIT 1) + k.per END AS free
  FROM krate k
),
blocked AS (
  SELECT r.queue, q.free AS q_free, k.free AS k_free FROM rest r
  LEFT JOIN qfree q ON q.queue = r.queue
  LEFT JOIN kfree k ON k.queue = r.queue AND k.limit_key = r.limit_key
),
throttle AS (
  SELECT b.queue, min(COALESCE(max(b.q_free, b.k_free), b.q_free, b.k_free)) AS until
  FROM blocked b GROUP BY b.queue
  HAVING min(b.q_free IS NOT NULL OR b.k_free IS NOT NULL) = 1
)
UPDATE {queues}
SET rate_wait = (SELECT t.until FROM throttle t WHERE t.queue = name),
    rate_throttles = rate_throttles
                     + ((SELECT t.until FROM throttle t WHERE t.queue = name) IS NOT NULL)
WHERE name IN (SELECT name FROM lim)
  AND rate_wait IS NOT (SELECT t.until FROM throttle t WHERE t.queue = name)

-- name: rate_used_queue
-- A queue's claims within the last "per" seconds (its queue-wide rate's use).
SELECT count(*) AS used FROM {claim_log} x
WHERE x.queue = :queue AND x.at > :now - :per

-- name: rate_used_key
-- A queue's claims of one key within the last "per" seconds.
SELECT count(*) AS used FROM {claim_log} x
WHERE x.queue = :queue AND x.limit_key = :key AND x.at > :now - :per

-- name: rate_used_busiest
-- The claims of the busiest key of a queue without a rate of its own ("own") within
-- the last :per seconds (the use of the "*" rate).
SELECT COALESCE(max(b.n), 0) AS used FROM (
  SELECT count(*) AS n FROM {claim_log} x
  WHERE x.queue = :queue AND x.limit_key IS NOT NULL AND x.limit_key NOT IN (SELECT value FROM json_each(:own))
    AND x.at > :now - :per
  GROUP BY x.limit_key
) b

-- name: rate_log_times
-- The claims of a queue the rate log holds, oldest first.
SELECT at FROM {claim_log} WHERE queue = :queue ORDER BY at

-- Fair share (migration 0011, store/fair.py, docs/flow-control.md "Fair share").

-- name: fair_set
-- The queue's shares (a JSON object, replacing any it had); the row is made if it has
-- none. Its passes and virtual time are kept.
INSERT INTO {queues} AS q (name, last_used, fair_shares)
VALUES (:queue, :now, :shares)
ON CONFLICT (name) DO UPDATE SET fair_shares = :shares
RETURNING name

-- name: fair_clear
-- The queue no longer fair; its passes and virtual time forgotten.
UPDATE {queues} SET fair_shares = NULL, fair_pass = NULL, fair_vtime = NULL
WHERE name = :queue
RETURNING name

-- name: fair_get
SELECT fair_shares FROM {queues} WHERE name = :queue
