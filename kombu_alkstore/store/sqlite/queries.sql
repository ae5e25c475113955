-- The SQLite engine's statements (see kombu_alkstore/store/sqlfile.py).
--
-- {jobs}, {dead}, ... are the schema's tables (prefixed names); every other {word} is a
-- fragment below. Bound parameters are sqlite3's :name; :now (epoch seconds, the
-- host's clock) is bound to every statement by the store unless the caller gives one.
-- Lists are bound as JSON text and read with json_each().

-- fragment: active_queues
-- The queues a claim or a due check looks at: those of :queues, less the paused ones
-- (see Store.pause_queue).
queue IN (SELECT value FROM json_each(:queues)
          WHERE value NOT IN (SELECT queue FROM {paused_queues}))

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
                    visibility_timeout, backoff_base, created_at)
VALUES (:queue, :msg_id, :body, :priority, :run_at,
  COALESCE(:expires_at, :now + (SELECT message_ttl FROM {queues} WHERE name = :queue)),
  COALESCE(:ma, (SELECT max_attempts FROM {queues} WHERE name = :queue), :d_ma),
  COALESCE(:vt, (SELECT visibility_timeout FROM {queues} WHERE name = :queue), :d_vt),
  COALESCE(:bb, (SELECT backoff_base FROM {queues} WHERE name = :queue), :d_bb),
  :now)
RETURNING id


-- name: claim_probe
-- Anything due (a lapsed claim included)? A read: a claim with nothing due takes no
-- write lock.
SELECT 1 AS due FROM {jobs} WHERE {active_queues} AND run_at <= :now LIMIT 1

-- name: take_spent
-- The spent lapsed claims among the due jobs, out of the queue (to "bury").
DELETE FROM {jobs} WHERE {spent} RETURNING {dead_columns}

-- name: bury
-- One row of dead_columns (a job taken out of the queue) into the dead letters.
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
VALUES ({dead_values}, :now, :error)

-- name: claim_pick
-- The claim's candidates, in claim order.
SELECT id FROM {jobs}
WHERE {active_queues} AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now)
  AND attempts < max_attempts
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: claim
-- The candidates (:ids) claimed: a Delivery's fields, and revoked_at (read as is:
-- "revoked_at IS NOT NULL" in this RETURNING read 1 for every row on SQLite 3.40).
UPDATE {jobs}
SET state = 'processing', attempts = attempts + 1, token = random(),
    deadline = :now + visibility_timeout, run_at = :now + visibility_timeout
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, token, queue, body, priority, attempts, max_attempts, backoff_base, deadline,
          msg_id, visibility_timeout, revoked_at

-- name: size
SELECT count(*) AS size FROM {jobs} WHERE queue = :queue AND state = 'pending'

-- name: next_due
-- min(run_at) of the pending jobs, by a loose index scan of the claim index: one
-- seek per priority present in each queue, not a scan of every pending row.
WITH RECURSIVE prio(queue, p) AS (
  SELECT qn.value, (SELECT priority FROM {jobs} WHERE queue = qn.value
                    ORDER BY priority DESC LIMIT 1)
  FROM json_each(:queues) AS qn WHERE qn.value NOT IN (SELECT queue FROM {paused_queues})
  UNION ALL
  SELECT prio.queue, (SELECT j.priority FROM {jobs} j WHERE j.queue = prio.queue
                      AND j.priority < prio.p ORDER BY j.priority DESC LIMIT 1)
  FROM prio WHERE prio.p IS NOT NULL
)
SELECT min((SELECT j.run_at FROM {jobs} j
            WHERE j.queue = prio.queue AND j.priority = prio.p AND j.state = 'pending'
              AND (j.expires_at IS NULL OR j.expires_at > :now)
            ORDER BY j.run_at LIMIT 1)) AS next_at
FROM prio WHERE prio.p IS NOT NULL


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
-- Maintenance: the jobs of base.MAINTENANCE_JOBS, each run in one write transaction.
-- (SQLite has no data-modifying CTEs: a job that moves rows copies them, then deletes
-- them, with the same :now; its counts are the statements' row counts.)
-- expire: the expired jobs of task queues, copied to the dead letters ("count").
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
SELECT {dead_columns}, :now, 'expired' FROM {jobs} j
WHERE {expired}
  AND NOT EXISTS (SELECT 1 FROM {queues} q WHERE q.name = j.queue AND {transient})

-- name: expire_delete
-- expire: every expired job leaves the queue (less those buried: "dropped").
DELETE FROM {jobs} WHERE {expired}

-- name: lapsed_bury
-- lapsed: the spent lapsed claims, copied to the dead letters, as a claim would bury
-- them (for queues no one consumes).
INSERT INTO {dead} ({dead_columns}, died_at, last_error)
SELECT {dead_columns}, :now, 'attempts exhausted' FROM {jobs} WHERE {lapsed}

-- name: lapsed_delete
DELETE FROM {jobs} WHERE {lapsed}

-- name: retention
-- retention: dead letters past their queue's retention (else the store's).
DELETE FROM {dead}
WHERE died_at < :now - COALESCE(
  (SELECT dead_letter_retention FROM {queues} q WHERE q.name = {dead}.queue), :retention)

-- name: expired_queues
-- expired_queues: queues unused past their x-expires (at least the grace).
DELETE FROM {queues} WHERE expires IS NOT NULL AND last_used + max(expires, :grace) < :now
RETURNING name

-- name: expired_queues_bindings
-- ... their bindings (:names, JSON) ...
DELETE FROM {bindings} WHERE queue IN (SELECT value FROM json_each(:names))

-- name: expired_queues_jobs
-- ... and their jobs.
DELETE FROM {jobs} WHERE queue IN (SELECT value FROM json_each(:names))


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
DELETE FROM {jobs} WHERE queue = :queue AND state = 'pending'

-- name: scheduled
SELECT {job_read} FROM {jobs}
WHERE state = 'pending' AND run_at > :now AND (:queue IS NULL OR queue = :queue)
ORDER BY run_at, id LIMIT :limit

-- name: peek
SELECT {job_read} FROM {jobs}
WHERE queue = :queue AND state = 'pending'
ORDER BY priority DESC, run_at, id LIMIT :limit

-- name: revoke
UPDATE {jobs} SET revoked_at = :now
WHERE msg_id IN (SELECT value FROM json_each(:ids)) AND revoked_at IS NULL

-- name: revoked_among
SELECT id FROM {jobs}
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND revoked_at IS NOT NULL

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
DELETE FROM {dead} WHERE {dead_pick}

-- name: dead_move_copy
-- Dead letters (:ids) to another queue (:to), due now, attempts reset (then
-- dead_move_delete).
INSERT INTO {jobs} (queue, {requeued_columns})
SELECT :to, id, msg_id, body, priority, max_attempts, visibility_timeout, backoff_base,
       created_at, :now, 0
FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids))

-- name: dead_move_delete
DELETE FROM {dead} WHERE id IN (SELECT value FROM json_each(:ids))

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

-- name: touch_queues
UPDATE {queues} SET last_used = :now WHERE name IN (SELECT value FROM json_each(:names))


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
  options = excluded.options, origin = excluded.origin, updated_at = excluded.updated_at,
  kind = excluded.kind, tz = excluded.tz,
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

-- name: schedule_ran_now
UPDATE {schedules} SET run_requested = NULL, last_run_at = :now,
  run_count = run_count + 1, last_error = NULL
WHERE name = :name AND run_requested = :requested

-- name: schedule_failed
UPDATE {schedules} SET last_error = :error WHERE name = :name

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
