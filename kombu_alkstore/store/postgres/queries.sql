-- The PostgreSQL engine's statements (see kombu_alkstore/store/sqlfile.py).
--
-- {jobs}, {dead}, ... are the schema's tables; every other {word} is a fragment below.
-- Bound parameters are psycopg's %(name)s; %(channel)s (the store's NOTIFY channel) and
-- %(lockspace)s (the first key of the waiters' advisory locks) are bound to every
-- statement by the store.

-- fragment: now
-- The database's clock in epoch seconds: every time the store compares or stamps.
extract(epoch FROM statement_timestamp())::float8

-- fragment: token
-- A fresh claim token (every claim, a worker's or a publisher's hand-off, gets one).
floor(random() * 9000000000000000000)::bigint

-- fragment: held_handles
-- The claims an operation names: h(id, token).
unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)

-- fragment: held
-- The validity of an operation on a claim: right token, still held, deadline not passed.
-- Only a processing job has a token (a claim sets both, pend clears both), so the state
-- is not named: "state = 'processing'" would let the planner walk the partial index
-- jobs_processing, which behind a pinned horizon holds every job ever claimed while
-- ANALYZE finds the table nearly empty, and that plan looks as cheap as this lookup by
-- id (the ids an index condition too, for the same reason).
j.id = ANY(%(ids)s::bigint[]) AND j.id = h.id AND j.token = h.token AND j.deadline > {now}

-- fragment: revoked
-- Whether job j's task was revoked (Store.revoke); jobs.revoked_at holds the marks a
-- version-4 store made.
(j.revoked_at IS NOT NULL OR EXISTS (SELECT 1 FROM {revokes} r WHERE r.msg_id = j.msg_id))

-- fragment: paused
-- The paused queue names (see Store.pause_queue): claims and the due checks skip them
-- with "<queue> <> ALL({paused})". Read once per statement (an InitPlan over the small
-- paused_queues table), which also plans faster than a NOT EXISTS anti-join
-- (benchmarks/web_cost.py times the claim with and without it).
ARRAY(SELECT queue FROM {paused_queues})

-- fragment: wake
-- Announce a job on the store's channel: [run_at, queue] as JSON, from the columns
-- run_at and queue of the statement's rows.
pg_notify(%(channel)s, json_build_array(run_at, queue)::text)

-- fragment: hear_keys
-- How many keys the waiters' hearing locks span (second keys -1 .. -hear_keys; a
-- waiter's liveness lock takes its positive backend pid): a publisher tries the one its
-- backend's pid picks, so concurrent publishers seldom try the same one.
8

-- fragment: unheard
-- True when no waiter hears the store's announcements now, so a publish need not make
-- one: a NOTIFY takes a lock at commit that every notifying commit of the server waits
-- for, through its WAL flush. A waiter hears while it holds each hearing key shared
-- (waiter_hear, then its LISTEN, then a claim). This takes its key exclusively until
-- the transaction ends, so a waiter starting to hear meanwhile waits for this commit,
-- and its claim finds the job; one that holds it already makes this false. Only in a
-- transaction of the publish's own: in a caller's, it would hold up the waiters.
pg_try_advisory_xact_lock(%(lockspace)s::int, -1 - mod(pg_backend_pid(), {hear_keys}))

-- fragment: wake_now
-- Announce due work on the column queue (no due time: due now).
pg_notify(%(channel)s, json_build_array(NULL::float8, queue)::text)

-- fragment: bump_routing
-- Exchanges or bindings changed (a CTE "changed" returned rows): a new routing version,
-- announced to every waiter.
UPDATE {meta} SET value = (value::bigint + 1)::text
WHERE key = 'routing_version' AND EXISTS (SELECT 1 FROM changed)
RETURNING pg_notify(%(channel)s, '"routing"')

-- fragment: offers_open
-- True while the offers table is small enough for a publish to read: an offer and a
-- hand-off each UPDATE their row, so behind a pinned xmin horizon (a session idle in
-- transaction, long readers) its dead versions pile up and a publish would read every
-- one. Past this size (8 pages, ~700 row versions) publishes look for no offer and
-- registers withdraw instead (jobs are announced and claimed as usual), until a VACUUM
-- once the horizon moves on truncates the emptied table. One syscall, once per
-- statement (an uncorrelated subquery: a one-time filter).
(SELECT pg_relation_size(%(offers_rel)s::regclass) <= 8 * current_setting('block_size')::int)

-- fragment: offer_dead
-- True for an offer (alias o) whose waiter is dead: a live one holds this lock
-- (see postgres/waiter.py).
pg_try_advisory_xact_lock_shared(%(lockspace)s::int, o.pid)

-- fragment: transient
-- A queue (alias q) declared transient (x-expires or x-message-ttl: event and reply
-- queues), whose expired messages are dropped rather than dead-lettered.
(q.expires IS NOT NULL OR q.message_ttl IS NOT NULL)

-- fragment: dead_columns
-- The columns a job keeps when it moves to the dead letters.
id, queue, msg_id, body, priority, attempts, max_attempts, visibility_timeout,
backoff_base, expires_at, created_at

-- fragment: job_read
-- A live job as Job(**row).
id, queue, msg_id, body, priority, state, attempts, max_attempts, created_at, run_at,
expires_at, deadline, NULL::float8 AS died_at, NULL::text AS last_error

-- fragment: dead_read
-- A dead letter as Job(**row).
id, queue, msg_id, body, priority, 'dead' AS state, attempts, max_attempts, created_at,
NULL::float8 AS run_at, expires_at, NULL::float8 AS deadline, died_at, last_error

-- fragment: dead_filter
-- The dashboard's dead-letter filter (admin.DeadFilter.params); every part optional.
(%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(since)s::float8 IS NULL OR died_at >= %(since)s::float8)
  AND (%(until)s::float8 IS NULL OR died_at < %(until)s::float8)
  AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
  AND (%(task1)s::bytea IS NULL OR position(%(task1)s::bytea IN body) > 0
       OR position(%(task2)s::bytea IN body) > 0)

-- fragment: dead_before
-- Dead letters after a page's last one (b_at, b_id), newest first; all without one.
(%(b_at)s::float8 IS NULL OR (died_at, id) < (%(b_at)s::float8, %(b_id)s::bigint))

-- fragment: schedule_columns
name, spec, interval, task, args, kwargs, options, next_at, origin, kind, tz, enabled,
last_run_at, run_count, last_error, run_requested

-- fragment: handoff_prefix
-- A waiter's own notification channel is this prefix and its backend pid.
'alkstore_w'

-- name: ping
SELECT 1 AS ok

-- name: clock
-- The database's clock now (not the statement's start): Store.measure_clock.
SELECT extract(epoch FROM clock_timestamp())::float8 AS now

-- name: setup_lock
-- Serialise concurrent setups of this schema (CREATE ... IF NOT EXISTS races).
SELECT pg_advisory_xact_lock(hashtext(%(channel)s))

-- name: meta_table
SELECT to_regclass(%(meta)s) AS oid

-- name: version
SELECT value FROM {meta} WHERE key = 'schema_version'

-- name: identify
-- The broker's (database, jobs table oid, server start): one per database copy.
SELECT current_database() AS database, to_regclass(%(jobs)s)::oid::bigint AS jobs,
       extract(epoch FROM pg_postmaster_start_time())::float8 AS started

-- name: waiter_start
-- A waiter's backend: its pid (its address for hand-offs) and its own channel.
SELECT pg_backend_pid() AS pid, {handoff_prefix} || pg_backend_pid() AS handoff_channel

-- name: waiter_lock
-- Held while the waiter lives: its offers are live (see offer_dead).
SELECT pg_advisory_lock(%(lockspace)s::int, %(pid)s::int)

-- name: waiter_hear
-- Held while the waiter hears the store's announcements (taken before its LISTEN, which
-- a claim follows): publishes announce their jobs (see unheard).
SELECT count(pg_advisory_lock_shared(%(lockspace)s::int, -k)) AS keys
FROM generate_series(1, {hear_keys}) AS k

-- name: waiter_deaf
-- The waiter stopped hearing them (UNLISTEN): release waiter_hear's keys.
SELECT count(pg_advisory_unlock_shared(%(lockspace)s::int, -k)) AS keys
FROM generate_series(1, {hear_keys}) AS k

-- name: withdraw_offers
DELETE FROM {offers} WHERE pid = %(pid)s

-- name: register
-- The offer of an idle channel (see "insert"): one row, its slots shared by all its
-- queues; no queues withdraws it.
-- While the table is too big to read (see offers_open) an offer is withdrawn instead.
-- One row, "open": whether the gate was open (false: no offer stands, and the worker
-- offers nothing for a while; transport/handoff.py).
WITH g AS (SELECT {offers_open} AS open),
gone AS (
  DELETE FROM {offers}
  WHERE pid = %(pid)s AND chan = %(chan)s
    AND (cardinality(%(queues)s::text[]) = 0 OR NOT (SELECT open FROM g))
),
made AS (
  INSERT INTO {offers} (pid, chan, queues, slots)
  SELECT %(pid)s, %(chan)s, %(queues)s::text[], %(slots)s
  FROM g WHERE g.open AND cardinality(%(queues)s::text[]) > 0
  ON CONFLICT (pid, chan) DO UPDATE SET queues = EXCLUDED.queues, slots = EXCLUDED.slots
)
SELECT open FROM g

-- fragment: new_job
-- The CTEs q (the job's queue row) and v (one row: the new job's run_at, expires_at,
-- max_attempts, vt, bb, and now): the message's own settings, else its queue's, else
-- the store's.
q AS (SELECT * FROM {queues} WHERE name = %(queue)s),
v AS (
  SELECT COALESCE({now} + %(delay)s::float8, %(run_at)s::float8, {now}) AS run_at,
         COALESCE(%(expires_at)s::float8, {now} + (SELECT message_ttl FROM q)) AS expires_at,
         COALESCE(%(ma)s::int, (SELECT max_attempts FROM q), %(d_ma)s::int) AS max_attempts,
         COALESCE(%(vt)s::float8, (SELECT visibility_timeout FROM q), %(d_vt)s::float8) AS vt,
         COALESCE(%(bb)s::float8, (SELECT backoff_base FROM q), %(d_bb)s::float8) AS bb,
         {now} AS now
)

-- fragment: announce
-- The last branches of the CASE that makes a publish's column "notified": the job is
-- announced on the channel (columns run_at and queue) unless no waiter hears, and then
-- "notified" is NULL, which tells the publisher (see insert_pending). In the caller's
-- transaction (handoff false) it is always announced.
WHEN %(handoff)s::boolean AND {unheard} THEN NULL
ELSE {wake}

-- name: insert
-- A new due job goes to an idle consumer that offered a slot (a live row in "offers")
-- already claimed, and the notification carries it (the hand-off object, decoded by
-- postgres/handoff.py), so the consumer starts it without a claim round trip. Otherwise
-- it is pending and announced on the channel ("notified": NULL when nobody heard).
WITH {new_job},
w AS (
  UPDATE {offers} w SET slots = w.slots - 1
  FROM (
    SELECT o.pid, o.chan FROM {offers} o, v
    WHERE %(handoff)s::boolean AND {offers_open}
      AND %(queue)s = ANY(o.queues) AND o.slots > 0
      AND v.run_at <= v.now AND (v.expires_at IS NULL OR v.expires_at > v.now)
      AND %(fits)s::boolean  -- the job fits in a notification (postgres/handoff.py)
      AND NOT {offer_dead}  -- a dead one's row is skipped (and deleted by dead_offers)
      -- nor is a job of a paused queue handed off (correlated to the offer row, so it
      -- is probed only when a worker is idle)
      AND NOT EXISTS (SELECT 1 FROM {paused_queues} pq
                      WHERE pq.queue = %(queue)s AND o.slots > 0)
      -- nor one of a queue with a concurrency limit: only a claim counts the queue's
      -- claims (under the limit's lock), so a job of such a queue waits to be claimed
      AND NOT EXISTS (SELECT 1 FROM {queues} lq
                      WHERE lq.name = %(queue)s AND o.slots > 0 AND {has_limit})
    ORDER BY o.slots DESC  -- the idlest: a burst spreads over the idle workers
    LIMIT 1
    FOR UPDATE OF o SKIP LOCKED
  ) pick
  WHERE w.pid = pick.pid AND w.chan = pick.chan
  RETURNING w.pid, w.chan
),
ins AS (
  INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                      visibility_timeout, backoff_base, created_at,
                      state, attempts, token, deadline, limit_key)
  SELECT %(queue)s, %(msg_id)s, %(body)s::bytea, %(priority)s,
         CASE WHEN w.pid IS NULL THEN v.run_at ELSE v.now + v.vt END,
         v.expires_at, v.max_attempts, v.vt, v.bb, v.now,
         CASE WHEN w.pid IS NULL THEN 'pending' ELSE 'processing' END,
         CASE WHEN w.pid IS NULL THEN 0 ELSE 1 END,
         CASE WHEN w.pid IS NULL THEN NULL ELSE {token} END,
         CASE WHEN w.pid IS NULL THEN NULL ELSE v.now + v.vt END,
         %(limit_key)s::text
  FROM v LEFT JOIN w ON true
  RETURNING id, queue, run_at, token, priority, attempts, max_attempts, backoff_base,
            deadline, msg_id, body, visibility_timeout
)
SELECT ins.id, CASE
  WHEN w.pid IS NOT NULL THEN pg_notify({handoff_prefix} || w.pid, {handoff_object})
  {announce}
  END AS notified
FROM ins LEFT JOIN w ON true

-- name: insert_pending
-- "insert" without looking for an idle consumer's offer: the job is pending, and
-- announced unless no waiter hears. A publisher runs it while its last publish was
-- heard by nobody (postgres/inserts.py): then no worker is idle, so no offer is worth
-- reading, and the offer scan, its gate and the UPDATE cost a quarter to a third of the
-- statement's server time (docs/benchmarks.md). A worker that starts hearing meanwhile
-- is woken and claims the job, and this publish's answer sends the next to "insert".
WITH {new_job}
INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                    visibility_timeout, backoff_base, created_at, limit_key)
SELECT %(queue)s, %(msg_id)s, %(body)s::bytea, %(priority)s, v.run_at, v.expires_at,
       v.max_attempts, v.vt, v.bb, v.now, %(limit_key)s::text
FROM v
RETURNING id, CASE {announce} END AS notified

-- name: insert_unique
-- A job with a unique key (see store/unique.py): inserted unless a live job of its queue
-- holds the key (the trigger unique_key_take skips the row when unique_keys has the key,
-- migration 0015), then pending and announced as "insert" does. Such a job is never
-- handed off: the hand-off locks an idle worker's offer row, and an insert whose key is
-- held by a publish not yet committed waits for that transaction, so it would hold the
-- offer (and the worker's next register) for as long. A duplicate inserts nothing,
-- announces nothing and returns no row; nor, as in "insert", does a publish no waiter
-- hears.
WITH {new_job}
INSERT INTO {jobs} (queue, msg_id, body, priority, run_at, expires_at, max_attempts,
                    visibility_timeout, backoff_base, created_at, unique_key,
                    unique_claimed, limit_key)
SELECT %(queue)s, %(msg_id)s, %(body)s::bytea, %(priority)s, v.run_at, v.expires_at,
       v.max_attempts, v.vt, v.bb, v.now, %(unique_key)s::text,
       %(unique_claimed)s::boolean, %(limit_key)s::text
FROM v
RETURNING id, CASE {announce} END AS notified

-- name: unique_holder
-- The live job holding a unique key in a queue (at most one: unique_keys' primary key).
SELECT {job_read} FROM {jobs}
WHERE id = (SELECT k.job_id FROM {unique_keys} k
            WHERE k.queue = %(queue)s AND k.key = %(unique_key)s)

-- fragment: handoff_object
-- The hand-off wire format: ["h", object], the object holding the Delivery's fields by
-- name and the channel it was handed to (decoded by postgres/handoff.py, and nowhere
-- else; the "h" tag keeps it safe for workers of earlier versions, see there).
json_build_array('h', json_build_object(
  'chan', w.chan, 'id', ins.id, 'token', ins.token, 'queue', ins.queue,
  'priority', ins.priority, 'attempts', ins.attempts, 'max_attempts', ins.max_attempts,
  'backoff_base', ins.backoff_base, 'deadline', ins.deadline, 'msg_id', ins.msg_id,
  'body', encode(ins.body, 'base64'), 'visibility_timeout', ins.visibility_timeout
))::text

-- fragment: has_limit
-- A queue row (alias lq) with a concurrency limit (migration 0007), a rate (0010) or
-- fair share (0011).
(lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL OR lq.rate_limits IS NOT NULL
 OR lq.fair_shares IS NOT NULL)

-- fragment: has_slots
-- A queue row (alias lq) with a concurrency limit: an ack frees one of its slots.
(lq.max_claimed IS NOT NULL OR lq.key_limits IS NOT NULL)

-- fragment: limited
-- The claim's queues that have a limit (docs/flow-control.md): for a queue without one a
-- primary-key probe of the queues table, and the claim goes on as before; the others'
-- jobs are picked by {limited_picks} (migration 0013), which locks their rows and counts
-- their claims race-free.
SELECT lq.name FROM {queues} lq WHERE lq.name = ANY(%(queues)s::text[]) AND {has_limit}

-- fragment: limit_scan
-- How many due jobs a claim on a queue with per-key limits looks at (at least its
-- batch): jobs beyond them wait for the next claim even when their keys have room.
256

-- fragment: limited_pick
-- The limited queues' candidates, only when the claim has such a queue (a one-time
-- filter: otherwise the function is not called), each with what the claim logs for
-- its rates if it takes it (log_at NULL: nothing; see claim_due).
SELECT p.id, p.priority, p.run_at, p.spent, p.log_at
FROM {limited_picks}(%(queues)s::text[], %(limit)s::int, {now}, {limit_scan}) p
WHERE EXISTS (SELECT 1 FROM lim)
LIMIT %(limit)s

-- fragment: bands
-- The claim's bands (postgres/floors.py): for each queue, ranges of the claim order
-- (priorities hi down to lo; one priority: run_at from run_from), disjoint and in claim
-- order. With no claim floor known a queue has one band, the whole order; with a floor
-- at priority p, "priority = p AND run_at >= floor" is one band, so its scan starts past
-- the dead index entries a pinned xmin horizon keeps before the floor.
unnest(%(b_queue)s::text[], %(b_hi)s::smallint[], %(b_lo)s::smallint[],
       %(b_from)s::float8[]) AS b(queue, hi, lo, run_from)

-- fragment: band_one
-- Job j is a due row of band b of queue qn.name if b is one priority (a floor's): an
-- equality on it, so a scan of the claim index is positioned at (queue, hi, run_from)
-- and ends at the first row not yet due.
b.hi = b.lo AND j.queue = qn.name AND j.priority = b.hi
AND j.run_at >= b.run_from AND j.run_at <= {now}
AND (j.expires_at IS NULL OR j.expires_at > {now})

-- fragment: band_several
-- Job j is a due row of band b of queue qn.name if b is several priorities (those
-- without a floor): a scan positioned at (queue, hi) that ends below priority lo.
b.hi > b.lo AND j.queue = qn.name AND j.priority <= b.hi AND j.priority >= b.lo
AND j.run_at <= {now}
AND (j.expires_at IS NULL OR j.expires_at > {now})

-- fragment: band_walk
-- The due rows of one band b of queue qn.name, in claim order: a scan of the claim
-- index in order ({band_one} or {band_several}: only one of the two runs, their first
-- condition is a one-time filter on the band).
SELECT * FROM (
 SELECT j.id, j.priority, j.run_at, (j.attempts >= j.max_attempts) AS spent
 FROM {jobs} j WHERE {band_one}
 ORDER BY j.priority DESC, j.run_at, j.id
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED) one
UNION ALL
SELECT * FROM (
 SELECT j.id, j.priority, j.run_at, (j.attempts >= j.max_attempts) AS spent
 FROM {jobs} j WHERE {band_several}
 ORDER BY j.priority DESC, j.run_at, j.id
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED) several

-- fragment: band_rows
-- A queue's candidates (alias qn), its bands walked in order: a later band is walked
-- only while the earlier ones did not fill the limit (a nested loop stopped by LIMIT),
-- so the rows come in claim order.
SELECT w.id, w.priority, w.run_at, w.spent
FROM {bands}
CROSS JOIN LATERAL ({band_walk}) w
WHERE b.queue = qn.name
LIMIT %(limit)s

-- fragment: due_one
-- The claim's candidates on one queue without a limit. "queue = %(queue)s" lets the
-- planner walk the claim index in order (band by band) and stop at LIMIT.
SELECT f.id, f.run_at AS was_due, f.spent
FROM (SELECT %(queue)s::text AS name) qn
CROSS JOIN LATERAL ({band_rows}) f
WHERE NOT EXISTS (SELECT 1 FROM lim)
  AND %(queue)s <> ALL({paused})

-- fragment: due_any
-- The candidates on several queues without a limit: "queue = ANY(...)" would gather and
-- sort every due row, so the best rows of each queue (each an ordered walk of its bands).
SELECT c.id, c.priority, c.run_at, c.spent
FROM unnest(%(queues)s::text[]) AS qn(name)
CROSS JOIN LATERAL ({band_rows}) c
WHERE qn.name <> ALL({paused}) AND qn.name <> ALL(ARRAY(SELECT name FROM lim))

-- fragment: claim_due
-- Claim the candidates "due": a spent one (a lapsed claim with no attempt left) goes to
-- the dead letters, and one row with a NULL id says how many did (places they took).
-- The rates' log gets one row per job taken that a rate counts (log_at, the time
-- limited_picks read under the queues' row locks), by log_claim in the last WHERE, on
-- claimed rows only (migration 13: a candidate the function picked from its later
-- snapshot was missing from this statement's; since migration 16 claim_rows, with a
-- snapshot of its own, claims it too). A claim without limits evaluates one
-- NULL test per row there (an INSERT in a CTE cost a claim 3 to 15 per cent, noisy).
-- jobs is written by id (delete_rows, claim_rows: migration 16, planned without
-- sequential scans, so a plan made while jobs was empty does not scan it whole once it
-- is large), not joined to due: a join lets a planner that thinks jobs empty (ANALYZE
-- behind a pinned horizon: reltuples 0) scan a whole index of it as the outer side.
gone AS (  -- the call made only when a candidate is spent (a one-time filter)
  SELECT * FROM {delete_rows}(ARRAY(SELECT due.id FROM due WHERE due.spent), NULL, {now})
  WHERE EXISTS (SELECT 1 FROM due WHERE due.spent)
),
buried AS (
  INSERT INTO {dead} ({dead_columns}, died_at, last_error)
  SELECT {dead_columns}, {now}, 'attempts exhausted' FROM gone RETURNING id
),
claimed AS (
  SELECT j.id, j.token, j.queue, j.body, j.priority, j.attempts, j.max_attempts,
         j.backoff_base, j.deadline, j.msg_id, j.visibility_timeout, j.limit_key,
         {revoked} AS revoked
  FROM {claim_rows}(ARRAY(SELECT due.id FROM due WHERE NOT due.spent), {now}) j
)
SELECT c.id, c.token, c.queue, c.body, c.priority, c.attempts, c.max_attempts,
       c.backoff_base, c.deadline, due.was_due, c.msg_id, c.visibility_timeout, c.revoked
FROM claimed c JOIN due ON due.id = c.id
WHERE CASE WHEN due.log_at IS NULL THEN true ELSE {log_claim}(c.queue, c.limit_key, due.log_at) END
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, count(*)::int, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM buried HAVING count(*) > 0

-- name: claim_one
WITH lim AS ({limited}),
due AS (
  SELECT f.id, f.was_due, f.spent, NULL::float8 AS log_at FROM ({due_one}) f
  UNION ALL
  SELECT p.id, p.run_at, p.spent, p.log_at FROM ({limited_pick}) p
),
{claim_due}

-- name: claim_any
-- The best of every queue's candidates, the limited queues' within their limits.
WITH lim AS ({limited}),
due AS (
  SELECT a.id, a.run_at AS was_due, a.spent, a.log_at FROM (
    SELECT f.id, f.priority, f.run_at, f.spent, NULL::float8 AS log_at FROM ({due_any}) f
    UNION ALL
    {limited_pick}
  ) a
  ORDER BY a.priority DESC, a.run_at, a.id
  LIMIT %(limit)s
),
{claim_due}

-- fragment: full
-- Queue qn.name has a concurrency limit and it is reached (migration 0007): nothing of
-- it can be claimed until a claim ends, which announces the queue (see freed). One
-- primary-key probe of a queue without a limit.
EXISTS (SELECT 1 FROM {queues} lq
        WHERE lq.name = qn.name AND lq.max_claimed IS NOT NULL
          AND lq.max_claimed <= (SELECT count(*) FROM {jobs} x WHERE x.queue = lq.name
                                 AND x.state = 'processing' AND x.deadline > {now}))

-- fragment: throttled
-- Queue qn.name's rates refused every due job its last claim left, until rate_wait
-- (migration 0010): nothing of it can be claimed before then.
EXISTS (SELECT 1 FROM {queues} lq WHERE lq.name = qn.name AND lq.rate_wait > {now})

-- name: has_due
-- Due work a claim may take (not of a queue at its limit), looked for in the bands a
-- claim would walk now (ClaimFloors.probe: from the head when the queue's full claim is
-- due), so it does not step over the dead entries before the floors either.
SELECT EXISTS (
  SELECT 1 FROM unnest(%(queues)s::text[]) AS qn(name)
  JOIN {bands} ON b.queue = qn.name
  WHERE (EXISTS (SELECT 1 FROM {jobs} j WHERE {band_one})
         OR EXISTS (SELECT 1 FROM {jobs} j WHERE {band_several}))
    AND qn.name <> ALL({paused}) AND NOT {full} AND NOT {throttled}
) AS due

-- name: look_behind
-- The claim floors' watch (postgres/lookbehind.py): for each floor (band b: queue,
-- priority hi = lo, run_from the floor), the first due job before it, from the head of
-- its priority in claim order. That walk steps over the dead entries a pinned horizon
-- keeps before the floor, here on a pooled connection and not in a claim. Each job found
-- is returned and announced as a late publish is (its run_at), so every waiter lowers
-- its floors below it. A job another claim has locked is found too: its floor goes
-- just below the live jobs, where the next claim walks anyway.
SELECT found.queue, found.run_at, {wake} AS announced
FROM (
  SELECT b.queue, f.run_at
  FROM {bands}
  CROSS JOIN LATERAL (
    SELECT j.run_at FROM {jobs} j
    WHERE j.queue = b.queue AND j.priority = b.hi AND j.run_at < b.run_from
      AND j.run_at <= {now} AND (j.expires_at IS NULL OR j.expires_at > {now})
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT 1) f
  WHERE b.queue <> ALL({paused})
) found

-- name: size
SELECT count(*) AS size FROM {jobs} WHERE queue = %(queue)s AND state = 'pending'

-- name: next_due
-- min(run_at) of the pending jobs, by a loose index scan of the claim index in each of
-- the bands a claim would walk now: one seek per priority present in a band, not a scan
-- of every pending row (a floor's band is its one priority, from the floor; a job not
-- yet due is never behind a floor, which is at most the database's time it was learnt).
-- A throttled queue (rate_wait ahead, migration 0010): its due jobs at rate_wait, a
-- delayed one at its own time (a rate never makes a job early, nor a delayed one late):
-- "later", each priority's first pending job not yet due, looked for only then (one
-- seek, as "run_at": not a scan of the queue's delayed jobs). "run_at" looks among the
-- due jobs first, as a claim does, and past now only when none is due: jobs' generations
-- (migration 0017) are merged in order, and an unbounded seek would walk to its end each
-- generation holding no pending job of the band (behind a pinned horizon: every dead
-- version of a claim whose deadline is ahead).
SELECT min(CASE WHEN first.run_at IS NULL OR NOT first.throttled THEN first.run_at
                ELSE least((SELECT lq.rate_wait FROM {queues} lq WHERE lq.name = qn.name),
                           first.later)
           END) AS next_due
FROM unnest(%(queues)s::text[]) AS qn(name)
JOIN {bands} ON b.queue = qn.name
CROSS JOIN LATERAL (
  WITH RECURSIVE prio(p) AS (
    SELECT CASE WHEN b.hi = b.lo THEN b.hi
                ELSE (SELECT j.priority FROM {jobs} j
                      WHERE j.queue = qn.name AND j.priority <= b.hi AND j.priority >= b.lo
                      ORDER BY j.priority DESC LIMIT 1) END
    UNION ALL
    SELECT (SELECT j.priority FROM {jobs} j
            WHERE j.queue = qn.name AND j.priority < prio.p AND j.priority >= b.lo
            ORDER BY j.priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL AND prio.p > b.lo
  )
  SELECT f.run_at, f.throttled,
         CASE WHEN f.throttled THEN
           (SELECT j.run_at FROM {jobs} j
            WHERE j.queue = qn.name AND j.priority = f.p AND j.run_at > {now}
              AND j.state = 'pending'
              AND (j.expires_at IS NULL OR j.expires_at > {now})
            ORDER BY j.run_at LIMIT 1) END AS later
  FROM (
    SELECT prio.p, {throttled} AS throttled,
           COALESCE(
             (SELECT j.run_at FROM {jobs} j
              WHERE j.queue = qn.name AND j.priority = prio.p AND j.run_at >= b.run_from
                AND j.run_at <= {now} AND j.state = 'pending'
                AND (j.expires_at IS NULL OR j.expires_at > {now})
              ORDER BY j.run_at LIMIT 1),
             (SELECT j.run_at FROM {jobs} j
              WHERE j.queue = qn.name AND j.priority = prio.p AND j.run_at >= b.run_from
                AND j.state = 'pending'
                AND (j.expires_at IS NULL OR j.expires_at > {now})
              ORDER BY j.run_at LIMIT 1)) AS run_at
    FROM prio WHERE prio.p IS NOT NULL
  ) f
) first
WHERE qn.name <> ALL({paused}) AND NOT {full}

-- fragment: freed
-- A slot freed: the queues of the rows "gone" that have a concurrency limit are
-- announced (their consumers claim again: one refused by the limit waits for this).
-- One primary-key probe per queue acked; queues without a limit announce nothing.
freed AS (
  SELECT {wake_now} AS notified FROM (SELECT DISTINCT queue FROM gone) g
  WHERE EXISTS (SELECT 1 FROM {queues} lq WHERE lq.name = g.queue AND {has_slots})
)

-- name: ack
WITH gone AS (SELECT * FROM {delete_rows}(%(ids)s::bigint[], %(tokens)s::bigint[], {now})),
{freed}
SELECT g.id FROM gone g, (SELECT count(*) FROM freed) f

-- name: heartbeat
-- The deadline is judged by the clock when the row is reached, too (not only at the
-- statement's start): a heartbeat that waited for a claim's lock on a lapsed claim
-- (limited_picks, migrations 0009 and 0013) finds it passed and revives nothing.
UPDATE {jobs} j
SET deadline = {now} + COALESCE(%(extend)s::float8, j.visibility_timeout),
    run_at = {now} + COALESCE(%(extend)s::float8, j.visibility_timeout)
FROM {held_handles}
WHERE {held} AND j.deadline > extract(epoch FROM clock_timestamp())::float8
RETURNING j.id

-- name: pend
WITH moved AS (
  UPDATE {jobs} j
  SET state = 'pending', token = NULL, deadline = NULL, run_at = {now} + h.delay,
      attempts = j.attempts - h.refund
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(delays)s::float8[], %(refunds)s::int[])
       AS h(id, token, delay, refund)
  WHERE {held} RETURNING j.id, j.queue, j.run_at
)
SELECT id, {wake} AS notified FROM moved

-- name: kill
WITH gone AS (SELECT * FROM {delete_rows}(%(ids)s::bigint[], %(tokens)s::bigint[], {now})),
{freed},
buried AS (
  INSERT INTO {dead} ({dead_columns}, died_at, last_error)
  SELECT {dead_columns}, {now}, %(error)s FROM gone RETURNING id
)
SELECT b.id FROM buried b, (SELECT count(*) FROM freed) f

-- name: revoke
-- A revoke is an operator's rare act: a scan of the jobs by task id is fine here. It
-- reads the jobs and writes {revokes} only, so it locks no job row (a revoke inside a
-- caller's long transaction must not hold back the heartbeat of the worker running it).
INSERT INTO {revokes} (msg_id, revoked_at)
SELECT DISTINCT msg_id, {now} FROM {jobs} WHERE msg_id = ANY(%(ids)s::text[])
ON CONFLICT (msg_id) DO NOTHING

-- name: revoked_among
SELECT j.id FROM {jobs} j WHERE j.id = ANY(%(job_ids)s::bigint[]) AND {revoked}

-- Maintenance: the jobs of base.MAINTENANCE_JOBS. Each job is a fragment of CTEs (named
-- for its job, so all five fit in one WITH) and a fragment giving its one result row:
-- count, dropped, queues (MaintenanceResult's columns). "name: <job>" runs one job;
-- "name: maintenance_round" runs all five as one statement, a worker's round.

-- fragment: expire_ctes
-- Expiry is about starting: a running job (a live claim) is left to finish. "count" is
-- the jobs dead-lettered, "dropped" those of transient queues dropped.
-- At most %(batch)s rows per job and run; a job that hit it says "more" and runs again.
-- The batch's test is repeated on the row deleted: one claimed meanwhile is left. The
-- batch is an array of ids, not a join: see claim_due.
expire_gone AS (
  DELETE FROM {jobs} j
  WHERE j.id = ANY(ARRAY(
      SELECT x.id FROM {jobs} x WHERE x.expires_at IS NOT NULL AND x.expires_at <= {now}
        AND (x.state = 'pending' OR x.deadline <= {now})
      LIMIT %(batch)s))
    AND j.expires_at IS NOT NULL AND j.expires_at <= {now}
    AND (j.state = 'pending' OR j.deadline <= {now})
  RETURNING j.*
),
expire_buried AS (
  INSERT INTO {dead} ({dead_columns}, died_at, last_error)
  SELECT {dead_columns}, {now}, 'expired' FROM expire_gone e
  WHERE NOT EXISTS (SELECT 1 FROM {queues} q WHERE q.name = e.queue AND {transient})
  RETURNING 1
)

-- fragment: expire_result
(SELECT count(*) FROM expire_buried)::int AS count,
((SELECT count(*) FROM expire_gone) - (SELECT count(*) FROM expire_buried))::int AS dropped,
NULL::text[] AS queues, (SELECT count(*) FROM expire_gone) >= %(batch)s AS more

-- fragment: lapsed_ctes
-- Lapsed claims with no attempt left go to the dead letters, as a claim would bury them
-- (for queues no one consumes); expired ones are left to "expire".
lapsed_gone AS (
  DELETE FROM {jobs} j
  WHERE j.id = ANY(ARRAY(
      SELECT x.id FROM {jobs} x
      WHERE x.state = 'processing' AND x.deadline <= {now} AND x.attempts >= x.max_attempts
        AND (x.expires_at IS NULL OR x.expires_at > {now})
      LIMIT %(batch)s))
    AND j.state = 'processing' AND j.deadline <= {now} AND j.attempts >= j.max_attempts
    AND (j.expires_at IS NULL OR j.expires_at > {now})
  RETURNING j.*
),
lapsed_buried AS (
  INSERT INTO {dead} ({dead_columns}, died_at, last_error)
  SELECT {dead_columns}, {now}, 'attempts exhausted' FROM lapsed_gone RETURNING 1
)

-- fragment: lapsed_result
(SELECT count(*) FROM lapsed_buried)::int AS count, 0 AS dropped, NULL::text[] AS queues,
(SELECT count(*) FROM lapsed_gone) >= %(batch)s AS more

-- fragment: retention_ctes
-- With no retention anywhere (the default) the first test is a one-time filter: no scan.
-- A join, not a sub-plan per letter: that one's cost estimate (500,000 letters: over a
-- million) also made PostgreSQL JIT-compile the round, 0.3 s each time. Only letters
-- older than the shortest retention are read (dead_died), as on SQLite: the queue's own
-- cutoff alone, a value per letter, read every letter each round.
retention_purged AS (
  DELETE FROM {dead} d
  WHERE d.id IN (
    SELECT x.id FROM {dead} x LEFT JOIN {queues} q ON q.name = x.queue
    WHERE (%(retention)s::float8 IS NOT NULL
           OR EXISTS (SELECT 1 FROM {queues} WHERE dead_letter_retention IS NOT NULL))
      AND x.died_at < {now} - (
        SELECT min(m.r) FROM (
          SELECT dead_letter_retention AS r FROM {queues} WHERE dead_letter_retention IS NOT NULL
          UNION ALL SELECT %(retention)s::float8) m)
      AND x.died_at < {now} - COALESCE(q.dead_letter_retention, %(retention)s::float8)
    LIMIT %(batch)s)
  RETURNING 1
),
-- Revokes go once no job of their task is left (a one-time filter: none, no scan).
revokes_gone AS (
  DELETE FROM {revokes} r
  WHERE r.msg_id IN (
    SELECT x.msg_id FROM {revokes} x
    WHERE EXISTS (SELECT 1 FROM {revokes})
      AND NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.msg_id = x.msg_id)
    LIMIT %(batch)s)
  RETURNING 1
)

-- fragment: retention_result
(SELECT count(*) FROM retention_purged)::int AS count, 0 AS dropped, NULL::text[] AS queues,
((SELECT count(*) FROM retention_purged) >= %(batch)s
 OR (SELECT count(*) FROM revokes_gone) >= %(batch)s) AS more

-- fragment: dead_offers_ctes
-- Not batched: one offer per consuming channel at most, a few rows.
dead_offers_gone AS (DELETE FROM {offers} o WHERE {offer_dead} RETURNING 1)

-- fragment: dead_offers_result
(SELECT count(*) FROM dead_offers_gone)::int AS count, 0 AS dropped, NULL::text[] AS queues,
false AS more

-- fragment: expired_queues_ctes
-- Queues unused past their x-expires (at least the grace), with their bindings and
-- jobs; a new routing version when bindings went. Not batched: the queues are few, and a
-- dropped queue's jobs go with it in the same run (they could not be claimed after).
dropped AS (
  DELETE FROM {queues} q
  WHERE q.expires IS NOT NULL AND q.last_used + GREATEST(q.expires, %(grace)s) < {now}
  RETURNING q.name
),
changed AS (DELETE FROM {bindings} b USING dropped WHERE b.queue = dropped.name RETURNING 1),
emptied AS (DELETE FROM {jobs} j USING dropped WHERE j.queue = dropped.name),
-- Their counts too: transient queues (pidbox, replies, events) are named anew by every
-- process, and kept counts would be /metrics series that never end.
uncounted AS (DELETE FROM {rates} r USING dropped WHERE r.queue = dropped.name),
bumped AS ({bump_routing})

-- fragment: expired_queues_result
(SELECT count(*) FROM dropped)::int AS count, 0 AS dropped,
(SELECT array_agg(name ORDER BY name) FROM dropped) AS queues, false AS more

-- name: expire
WITH {expire_ctes}
SELECT {expire_result}

-- name: lapsed
WITH {lapsed_ctes}
SELECT {lapsed_result}

-- name: retention
WITH {retention_ctes}
SELECT {retention_result}

-- name: dead_offers
WITH {dead_offers_ctes}
SELECT {dead_offers_result}

-- name: expired_queues
WITH {expired_queues_ctes}
SELECT {expired_queues_result}

-- name: maintenance_round
-- Every job in one statement (one transaction, one snapshot): one row per job, in
-- MAINTENANCE_JOBS order. A row two jobs would delete (an expired job of a dropped
-- queue) is deleted once, by whichever comes first.
WITH {expire_ctes}, {lapsed_ctes}, {retention_ctes}, {dead_offers_ctes}, {expired_queues_ctes}
SELECT 'expire' AS job, {expire_result}
UNION ALL SELECT 'lapsed', {lapsed_result}
UNION ALL SELECT 'retention', {retention_result}
UNION ALL SELECT 'dead_offers', {dead_offers_result}
UNION ALL SELECT 'expired_queues', {expired_queues_result}

-- name: get_job_by_id
SELECT {job_read} FROM {jobs} WHERE id = %(id)s
UNION ALL SELECT {dead_read} FROM {dead} WHERE id = %(id)s

-- name: get_job_by_msg
(SELECT {job_read} FROM {jobs} WHERE msg_id = %(id)s ORDER BY id DESC LIMIT 1)
UNION ALL
(SELECT {dead_read} FROM {dead} WHERE msg_id = %(id)s ORDER BY died_at DESC LIMIT 1)
LIMIT 1

-- name: counts
WITH live AS (
  SELECT queue,
         count(*) FILTER (WHERE state = 'pending' AND run_at <= {now}) AS pending,
         count(*) FILTER (WHERE state = 'pending' AND run_at > {now}) AS delayed,
         count(*) FILTER (WHERE state = 'processing') AS processing,
         {now} - min(created_at) FILTER (WHERE state = 'pending' AND run_at <= {now}) AS age
  FROM {jobs} WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s)
  GROUP BY queue
),
dl AS (
  SELECT queue, count(*) AS dead FROM {dead}
  WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s) GROUP BY queue
),
names AS (
  SELECT queue FROM live UNION SELECT queue FROM dl
  UNION SELECT unnest(COALESCE(%(queues)s::text[], '{}'))
)
SELECT n.queue, COALESCE(live.pending, 0) AS pending, COALESCE(live.delayed, 0) AS delayed,
       COALESCE(live.processing, 0) AS processing, COALESCE(dl.dead, 0) AS dead,
       live.age AS oldest_age
FROM names n LEFT JOIN live USING (queue) LEFT JOIN dl USING (queue)
ORDER BY n.queue

-- name: purge
-- One row per queue purged: how many, the first %(cap)s ids (for its act, store/acts.py).
WITH changed AS (
  DELETE FROM {jobs} WHERE queue = %(queue)s AND state = 'pending' RETURNING id, queue
)
{changed_groups}

-- name: scheduled
SELECT {job_read} FROM {jobs}
WHERE state = 'pending' AND run_at > {now} AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY run_at, id LIMIT %(limit)s

-- name: peek
SELECT {job_read} FROM {jobs}
WHERE queue = %(queue)s AND state = 'pending'
ORDER BY priority DESC, run_at, id LIMIT %(limit)s

-- name: claim_stats
WITH p AS (
  SELECT queue, count(*) AS n, min(created_at) AS oldest, min(deadline) AS deadline
  FROM {jobs} WHERE state = 'processing' GROUP BY queue
),
w AS (
  SELECT qn.queue, count(*) AS offers, sum(o.slots) AS slots
  FROM {offers} o CROSS JOIN LATERAL unnest(o.queues) AS qn(queue) GROUP BY qn.queue
)
SELECT COALESCE(p.queue, w.queue) AS queue, COALESCE(p.n, 0) AS processing,
       p.oldest AS oldest_created, p.deadline AS next_deadline,
       COALESCE(w.offers, 0) AS offers, COALESCE(w.slots, 0)::int AS offered_slots
FROM p FULL JOIN w ON p.queue = w.queue ORDER BY 1

-- name: dead_list
SELECT {dead_read} FROM {dead}
WHERE %(queue)s::text IS NULL OR queue = %(queue)s
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: dead_requeue
WITH back AS (
  DELETE FROM {dead}
  WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
    AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  RETURNING *
),
ins AS (
  INSERT INTO {jobs} (id, queue, msg_id, body, priority, run_at, expires_at, attempts,
                      max_attempts, visibility_timeout, backoff_base, created_at)
  SELECT id, queue, msg_id, body, priority, {now}, NULL, 0, max_attempts,
         visibility_timeout, backoff_base, created_at FROM back
  RETURNING id, queue
)
-- One row per queue: how many, the first %(cap)s ids (for its act), its consumers woken.
SELECT queue, count(*)::int AS n, (array_agg(id ORDER BY id))[1:%(cap)s] AS ids,
       {wake_now} AS notified
FROM ins GROUP BY queue

-- name: dead_move
WITH back AS (DELETE FROM {dead} WHERE id = ANY(%(ids)s::bigint[]) RETURNING *),
ins AS (
  INSERT INTO {jobs} (id, queue, msg_id, body, priority, run_at, expires_at, attempts,
                      max_attempts, visibility_timeout, backoff_base, created_at)
  SELECT id, %(to)s, msg_id, body, priority, {now}, NULL, 0, max_attempts,
         visibility_timeout, backoff_base, created_at FROM back
  RETURNING id
),
woke AS (SELECT {wake_now} AS notified FROM (SELECT %(to)s::text AS queue) AS t),
changed AS (SELECT b.id, b.queue FROM ins JOIN back b ON b.id = ins.id, woke)
-- One row per queue the dead letters came from (for its act, store/acts.py).
{changed_groups}

-- name: dead_purge
-- One row per queue: how many, the first %(cap)s ids (for its act, store/acts.py).
WITH changed AS (
  DELETE FROM {dead}
  WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
    AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  RETURNING id, queue
)
{changed_groups}

-- name: dead_explain
UPDATE {dead} SET last_error = %(error)s WHERE msg_id = %(msg_id)s AND last_error = %(was)s

-- name: dead_search
SELECT {dead_read} FROM {dead}
WHERE {dead_filter} AND {dead_before}
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: dead_search_window
SELECT {dead_read} FROM (
  SELECT * FROM {dead} WHERE {dead_before}
  ORDER BY died_at DESC, id DESC LIMIT %(scan)s
) AS w
WHERE {dead_filter}
ORDER BY died_at DESC, id DESC LIMIT %(limit)s

-- name: dead_window
-- The last row of a window, if any row follows it (else the search is complete).
SELECT died_at, id FROM {dead} WHERE {dead_before}
ORDER BY died_at DESC, id DESC OFFSET %(scan)s - 1 LIMIT 2

-- name: dead_count
SELECT count(*) AS count FROM (SELECT 1 FROM {dead} WHERE {dead_filter} LIMIT %(cap)s) AS m

-- name: dead_ids
SELECT id FROM {dead} WHERE {dead_filter} AND id > %(after)s ORDER BY id LIMIT %(limit)s

-- name: queue_pause
INSERT INTO {paused_queues} (queue, paused_at) VALUES (%(name)s, {now})
ON CONFLICT (queue) DO NOTHING RETURNING queue

-- name: queue_resume
-- Wakes its consumers for its due jobs, and announces its next delayed one: while it was
-- paused they learnt no due time for it, and would find it at the safety poll only.
WITH gone AS (DELETE FROM {paused_queues} WHERE queue = %(name)s RETURNING queue)
SELECT queue, {wake_now} AS notified,
       CASE WHEN d.next_at IS NOT NULL
            THEN pg_notify(%(channel)s, json_build_array(d.next_at, queue)::text) END
         AS announced
FROM gone g, LATERAL (
  SELECT min(j.run_at) AS next_at FROM {jobs} j
  WHERE j.queue = g.queue AND j.state = 'pending' AND j.run_at > {now}
) d

-- name: paused_list
SELECT queue, paused_at FROM {paused_queues} ORDER BY queue

-- name: rates_add
INSERT INTO {rates} AS r (queue, minute, published, acked)
SELECT q, m, sum(p), sum(a) FROM (
  SELECT * FROM unnest(%(queues)s::text[], %(minutes)s::float8[], %(pub)s::bigint[],
                       %(ack)s::bigint[]) AS x(q, m, p, a)
  UNION ALL
  SELECT q, %(total)s::float8, p, a FROM unnest(%(queues)s::text[], %(pub)s::bigint[],
                                               %(ack)s::bigint[]) AS y(q, p, a)
) c GROUP BY q, m
ON CONFLICT (queue, minute) DO UPDATE
SET published = r.published + EXCLUDED.published, acked = r.acked + EXCLUDED.acked

-- name: rates_since
SELECT queue, minute, published, acked FROM {rates}
WHERE minute >= %(since)s AND minute > 0 ORDER BY minute, queue

-- name: rates_totals
SELECT queue, minute, published, acked FROM {rates} WHERE minute = %(total)s ORDER BY queue

-- name: rates_trim
DELETE FROM {rates} WHERE minute < %(before)s AND minute > 0

-- name: exchange_declare
WITH changed AS (
  INSERT INTO {exchanges} (name, type) VALUES (%(name)s, %(type)s)
  ON CONFLICT (name) DO UPDATE SET type = EXCLUDED.type
  WHERE {exchanges}.type IS DISTINCT FROM EXCLUDED.type RETURNING 1
)
{bump_routing}

-- name: exchange_type
SELECT type FROM {exchanges} WHERE name = %(name)s

-- name: exchange_delete
WITH changed AS (DELETE FROM {exchanges} WHERE name = %(name)s RETURNING 1),
unbound AS (DELETE FROM {bindings} WHERE exchange = %(name)s)
{bump_routing}

-- name: bind
WITH changed AS (
  INSERT INTO {bindings} (exchange, routing_key, queue) VALUES (%(exchange)s, %(rk)s, %(queue)s)
  ON CONFLICT DO NOTHING RETURNING 1
)
{bump_routing}

-- name: unbind
WITH changed AS (
  DELETE FROM {bindings} WHERE exchange = %(exchange)s AND routing_key = %(rk)s
  AND queue = %(queue)s RETURNING 1
)
{bump_routing}

-- name: bindings
SELECT routing_key, queue FROM {bindings} WHERE exchange = %(exchange)s

-- name: routing_version
SELECT value FROM {meta} WHERE key = 'routing_version'

-- name: queue_declare
INSERT INTO {queues} (name, message_ttl, expires, last_used)
VALUES (%(name)s, %(ttl)s, %(expires)s, {now})
ON CONFLICT (name) DO UPDATE SET message_ttl = EXCLUDED.message_ttl,
  expires = EXCLUDED.expires, last_used = EXCLUDED.last_used

-- name: queue_exists
SELECT 1 AS found FROM {queues} WHERE name = %(name)s

-- name: queue_delete
WITH gone AS (DELETE FROM {queues} WHERE name = %(name)s),
changed AS (DELETE FROM {bindings} WHERE queue = %(name)s RETURNING 1),
emptied AS (DELETE FROM {jobs} WHERE queue = %(name)s RETURNING 1),
uncounted AS (DELETE FROM {rates} WHERE queue = %(name)s),
bumped AS ({bump_routing})
SELECT count(*) AS deleted FROM emptied

-- name: touch_queues
-- In name order, as a claim locks limited queues' rows (no deadlock between them).
UPDATE {queues} SET last_used = {now}
WHERE name IN (SELECT name FROM {queues} WHERE name = ANY(%(names)s)
               ORDER BY name FOR NO KEY UPDATE)
RETURNING name

-- name: lease_acquire
INSERT INTO {leases} (name, owner, expires_at) VALUES (%(name)s, %(owner)s, {now} + %(ttl)s)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE {leases}.owner = EXCLUDED.owner OR {leases}.expires_at <= {now}
RETURNING owner

-- name: lease_release
DELETE FROM {leases} WHERE name = %(name)s AND owner = %(owner)s

-- name: lease_holder
SELECT owner FROM {leases} WHERE name = %(name)s AND expires_at > {now}

-- name: schedule_upsert
-- Beat schedules. An upsert keeps the lifecycle columns (enabled, last run, run count,
-- last error, a pending run-now) and, with "keep", the stored next_at while the kind,
-- spec and time zone are unchanged (the grid survives restarts and other edits).
INSERT INTO {schedules} (name, spec, interval, task, args, kwargs, options, next_at, origin,
                         kind, tz, updated_at)
VALUES (%(name)s, %(spec)s, %(interval)s, %(task)s, %(args)s, %(kwargs)s, %(options)s,
        %(next_at)s, %(origin)s, %(kind)s, %(tz)s, {now})
ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, interval = EXCLUDED.interval,
  task = EXCLUDED.task, args = EXCLUDED.args, kwargs = EXCLUDED.kwargs,
  origin = EXCLUDED.origin, updated_at = EXCLUDED.updated_at,
  kind = EXCLUDED.kind, tz = EXCLUDED.tz,
  -- The beat's own state in the options object (alkstore_state) is kept.
  options = CASE WHEN strpos({schedules}.options, '"alkstore_state"') = 0 THEN EXCLUDED.options
                 ELSE jsonb_set(EXCLUDED.options::jsonb, ARRAY['alkstore_state'],
                                {schedules}.options::jsonb -> 'alkstore_state')::text END,
  next_at = CASE WHEN %(keep)s AND ({schedules}.kind, {schedules}.spec, {schedules}.tz)
                                = (EXCLUDED.kind, EXCLUDED.spec, EXCLUDED.tz)
                 THEN {schedules}.next_at ELSE EXCLUDED.next_at END

-- name: schedule_delete
DELETE FROM {schedules} WHERE name = %(name)s

-- name: schedule_list
SELECT {schedule_columns} FROM {schedules} ORDER BY name

-- name: schedule_get
SELECT {schedule_columns} FROM {schedules} WHERE name = %(name)s

-- name: schedule_clock
-- The database's clock: what "due" is measured against (never a beat host's clock).
SELECT {now} AS now

-- name: schedule_due
SELECT {schedule_columns} FROM {schedules}
WHERE (enabled AND next_at <= %(now)s) OR run_requested IS NOT NULL
ORDER BY next_at, name
FOR UPDATE SKIP LOCKED

-- name: schedule_advance
-- One boundary fired: the next one, guarded by the one fired (a second ticker's advance
-- of the same boundary matches no row).
UPDATE {schedules} SET next_at = %(new)s, last_run_at = %(now)s, run_count = run_count + 1,
  last_error = NULL
WHERE name = %(name)s AND next_at = %(prev)s

-- name: schedule_skip
-- Missed boundaries beyond the catch-up limit: skipped, not counted as runs.
UPDATE {schedules} SET next_at = %(new)s WHERE name = %(name)s AND next_at = %(prev)s

-- name: schedule_skip_busy
-- No stacking: due times skipped while the previous run is live, counted in the options
-- object's alkstore_state.skipped; guarded by the boundary as an advance is.
UPDATE {schedules} SET next_at = %(new)s,
  options = jsonb_set(options::jsonb, ARRAY['alkstore_state'],
    COALESCE(options::jsonb -> 'alkstore_state', '{}'::jsonb) || jsonb_build_object('skipped',
      COALESCE((options::jsonb #>> ARRAY['alkstore_state', 'skipped'])::bigint, 0)
      + %(count)s::bigint))::text
WHERE name = %(name)s AND next_at = %(prev)s

-- name: schedule_set_job
-- No stacking: the job id (primary key) of the schedule's last run.
UPDATE {schedules} SET options = jsonb_set(options::jsonb, ARRAY['alkstore_state'],
    COALESCE(options::jsonb -> 'alkstore_state', '{}'::jsonb)
    || jsonb_build_object('job', %(job)s::bigint))::text
WHERE name = %(name)s

-- name: schedule_job_floor
-- The highest job id before a fire's publish (a primary-key index read).
SELECT COALESCE(max(id), 0) AS id FROM {jobs}

-- name: schedule_job_since
-- The job a fire just published: ids above the floor only (a primary-key range).
SELECT id FROM {jobs} WHERE id > %(floor)s AND msg_id = %(msg)s ORDER BY id DESC LIMIT 1

-- name: schedule_job_live
-- Whether the job is still queued, delayed or claimed (a primary-key read).
SELECT count(*) AS n FROM {jobs} WHERE id = %(id)s

-- name: schedule_ran_now
UPDATE {schedules} SET run_requested = NULL, last_run_at = %(now)s,
  run_count = run_count + 1, last_error = NULL
WHERE name = %(name)s AND run_requested = %(requested)s

-- name: schedule_failed
UPDATE {schedules} SET last_error = %(error)s WHERE name = %(name)s

-- name: schedule_savepoint
-- One schedule's fire inside a tick (ScheduleTick.savepoint): its failure undoes it alone.
SAVEPOINT alkstore_fire

-- name: schedule_savepoint_undo
ROLLBACK TO SAVEPOINT alkstore_fire

-- name: schedule_savepoint_release
RELEASE SAVEPOINT alkstore_fire

-- name: schedule_run_now
UPDATE {schedules} SET run_requested = COALESCE(run_requested, {now}) WHERE name = %(name)s

-- name: schedule_disable
UPDATE {schedules} SET enabled = false WHERE name = %(name)s

-- name: schedule_enable
-- Re-enabled: the next boundary on the same grid after now (computed by the caller).
UPDATE {schedules} SET enabled = true, next_at = %(new)s
WHERE name = %(name)s AND next_at = %(prev)s

-- Concurrency limits (migration 0007, store/limits.py, docs/flow-control.md).

-- name: limit_set
-- The limit of a queue (key NULL) or of one key of it (the key "*": every key without
-- its own), the queue's row made if it has none (a queue declared later keeps it).
INSERT INTO {queues} AS q (name, last_used, max_claimed, key_limits)
VALUES (%(queue)s, {now},
        CASE WHEN %(key)s::text IS NULL THEN %(n)s::int END,
        CASE WHEN %(key)s::text IS NOT NULL
             THEN jsonb_build_object(%(key)s::text, %(n)s::int)::text END)
ON CONFLICT (name) DO UPDATE SET
  max_claimed = CASE WHEN %(key)s::text IS NULL THEN %(n)s::int ELSE q.max_claimed END,
  key_limits = CASE WHEN %(key)s::text IS NULL THEN q.key_limits
                    ELSE (COALESCE(q.key_limits::jsonb, '{}'::jsonb)
                          || jsonb_build_object(%(key)s::text, %(n)s::int))::text END
RETURNING q.name

-- name: limit_clear
-- No limit any more on the queue (key NULL) or on one key of it.
UPDATE {queues} q SET
  max_claimed = CASE WHEN %(key)s::text IS NULL THEN NULL ELSE q.max_claimed END,
  key_limits = CASE WHEN %(key)s::text IS NULL THEN q.key_limits
                    ELSE NULLIF((q.key_limits::jsonb - %(key)s::text)::text, '{}') END
WHERE q.name = %(queue)s
RETURNING q.name

-- name: limits_list
-- Every queue with a limit and its live claims (LimitUse rows, store/limits.py).
SELECT lq.name AS queue, lq.max_claimed, lq.key_limits, lq.rate_limits, lq.rate_wait,
       lq.rate_throttles, lq.fair_shares,
       (SELECT count(*) FROM {jobs} j
        WHERE j.queue = lq.name AND j.state = 'processing' AND j.deadline > {now})::int
         AS used
FROM {queues} lq WHERE {has_limit} ORDER BY lq.name

-- name: limit_keys_used
-- The live claims per key of the queues with per-key limits.
SELECT j.queue, j.limit_key, count(*)::int AS used
FROM {jobs} j JOIN {queues} lq ON lq.name = j.queue AND lq.key_limits IS NOT NULL
WHERE j.state = 'processing' AND j.deadline > {now} AND j.limit_key IS NOT NULL
GROUP BY j.queue, j.limit_key ORDER BY j.queue, j.limit_key

-- Rate limits (migration 0010, store/rates.py, docs/flow-control.md "Rate limits").

-- name: rate_set
-- The rate of a queue (key NULL: stored under "") or of one key of it ("*": every key
-- without its own): [N, P], at most N claims in any P seconds. The queue's row is made
-- if it has none; its rate_wait is forgotten (the new rate may allow a claim now).
INSERT INTO {queues} AS q (name, last_used, rate_limits)
VALUES (%(queue)s, {now},
        jsonb_build_object(COALESCE(%(key)s::text, ''),
                           jsonb_build_array(%(n)s::int, %(per)s::float8))::text)
ON CONFLICT (name) DO UPDATE SET
  rate_limits = (COALESCE(q.rate_limits::jsonb, '{}'::jsonb)
                 || jsonb_build_object(COALESCE(%(key)s::text, ''),
                                       jsonb_build_array(%(n)s::int, %(per)s::float8)))::text,
  rate_wait = NULL
RETURNING q.name

-- name: rate_clear
-- No rate any more on the queue (key NULL) or on one key of it.
UPDATE {queues} q SET
  rate_limits = NULLIF((COALESCE(q.rate_limits::jsonb, '{}'::jsonb)
                        - COALESCE(%(key)s::text, ''))::text, '{}'),
  rate_wait = NULL
WHERE q.name = %(queue)s
RETURNING q.name

-- name: rate_forget
-- The claims logged for a queue left without a rate.
DELETE FROM {claim_log} o WHERE o.queue = %(queue)s
  AND NOT EXISTS (SELECT 1 FROM {queues} lq WHERE lq.name = %(queue)s
                  AND lq.rate_limits IS NOT NULL)
RETURNING queue

-- name: rate_used_queue
-- A queue's claims within the last "per" seconds (its queue-wide rate's use).
SELECT count(*) AS used FROM {claim_log} x
WHERE x.queue = %(queue)s AND x.at > {now} - %(per)s::float8

-- name: rate_used_key
-- A queue's claims of one key within the last "per" seconds.
SELECT count(*) AS used FROM {claim_log} x
WHERE x.queue = %(queue)s AND x.limit_key = %(key)s::text AND x.at > {now} - %(per)s::float8

-- name: rate_used_busiest
-- The claims of the busiest key of a queue without a rate of its own ("own") within
-- the last %(per)s seconds (the use of the "*" rate).
SELECT COALESCE(max(b.n), 0) AS used FROM (
  SELECT count(*) AS n FROM {claim_log} x
  WHERE x.queue = %(queue)s AND x.limit_key IS NOT NULL AND NOT (x.limit_key = ANY(%(own)s::text[]))
    AND x.at > {now} - %(per)s::float8
  GROUP BY x.limit_key
) b

-- name: horizon_holders
-- What keeps this database's dead row versions from being removed (store/health.py):
-- this database's transactions open longer than %(older_than)s seconds, replication
-- slots holding an xmin, prepared transactions; the oldest horizon first.
SELECT h.* FROM (
  SELECT 'session' AS kind, a.pid::text AS holder, a.state, a.application_name AS app,
         a.usename::text AS role, extract(epoch FROM now() - a.xact_start)::float8 AS age,
         age(COALESCE(a.backend_xid, a.backend_xmin))::bigint AS xids
  FROM pg_stat_activity a
  WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
    AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
    AND a.xact_start < now() - make_interval(secs => %(older_than)s::float8)
  UNION ALL
  SELECT 'slot', s.slot_name::text, CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
         NULL, NULL, NULL, age(s.xmin)::bigint
  FROM pg_replication_slots s WHERE s.xmin IS NOT NULL
  UNION ALL
  SELECT 'prepared', p.gid, 'prepared', NULL, p.owner::text,
         extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
  FROM pg_prepared_xacts p WHERE p.database = current_database()
) h
ORDER BY h.xids DESC NULLS LAST
LIMIT %(limit)s

-- name: table_health
-- The store's tables: the server's live and dead row estimates, size, last vacuum, and
-- whether autovacuum runs on them (the server's setting and the table's own). A table
-- split into parts (jobs' generations) is the sum of its parts, its last vacuum the
-- oldest of theirs, and autovacuum on only if it is on every part. (The parts from the
-- catalog, pg_inherits: pg_partition_tree would lock them, in an order a DROP SCHEMA
-- does not share.)
SELECT p.relname::text AS "table", sum(s.n_live_tup)::bigint AS live,
       sum(s.n_dead_tup)::bigint AS dead,
       sum(pg_total_relation_size(s.relid))::bigint AS bytes,
       extract(epoch FROM min(GREATEST(s.last_vacuum, s.last_autovacuum)))::float8
         AS vacuumed_at,
       bool_and(current_setting('autovacuum')::boolean AND COALESCE(
          (SELECT o.option_value FROM pg_options_to_table(c.reloptions) o
           WHERE o.option_name = 'autovacuum_enabled'), 'on')::boolean) AS autovacuum
FROM pg_class p
CROSS JOIN LATERAL (SELECT i.inhrelid AS relid FROM pg_inherits i WHERE i.inhparent = p.oid
                    UNION ALL SELECT p.oid WHERE p.relkind = 'r') t
JOIN pg_class c ON c.oid = t.relid
JOIN pg_stat_user_tables s ON s.relid = t.relid
WHERE p.relnamespace = to_regnamespace(quote_ident(%(schema)s))
  AND p.relname = ANY(%(tables)s::text[]) AND p.relkind IN ('r', 'p')
GROUP BY p.relname
ORDER BY dead DESC, p.relname

-- name: jobs_grown
-- Whether a generation of jobs has grown to four times its size at its last ANALYZE,
-- VACUUM or TRUNCATE (never: 0 pages) and past 256 pages (2 MB): plans made on the
-- smaller table may walk it (store/planner.py). One catalog read, one size syscall a
-- generation.
SELECT COALESCE(bool_or(pg_relation_size(c.oid) / current_setting('block_size')::int
                        >= greatest(4 * c.relpages, 256)), false) AS grown
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{jobs}'::regclass

-- name: rotate_generation
-- One rotation of jobs' generations (migration 0017; store/generations.py): what it did
-- and how many live rows it copied forward.
SELECT outcome, moved FROM {rotate_generation}(%(cap)s::int, %(small_bytes)s::int)

-- name: offers_closed
-- The hand-off's gate is closed (the offers table is past offers_open's size) and this
-- role may VACUUM the table: it owns it (store/generations.py, reopen_handoff).
SELECT NOT {offers_open}
       AND pg_has_role((SELECT relowner FROM pg_class
                        WHERE oid = %(offers_rel)s::regclass), 'MEMBER') AS closed

-- name: offers_vacuum
-- Its dead versions removed where the horizon allows, and the emptied table truncated
-- (registers withdraw while the gate is closed). Skipped at once if its lock is held.
VACUUM (SKIP_LOCKED) {offers}

-- name: jobs_analyze
-- The planner's statistics of jobs' generations gathered anew (every session plans
-- again). Only of those holding pages: one analyzed empty is planned as empty, by a
-- sequential scan, until it is truncated or analyzed again, however it fills; one a
-- rotation truncated is planned as at least ten pages, by index (migration 0017). Waits
-- at most 100 ms for a lock (held by a VACUUM or another ANALYZE, which refresh them
-- too) and otherwise leaves it to the next round.
DO $$
DECLARE
  part REGCLASS;
BEGIN
  PERFORM set_config('lock_timeout', '100ms', true);
  FOR part IN SELECT inhrelid FROM pg_inherits
              WHERE inhparent = '{jobs}'::regclass AND pg_relation_size(inhrelid) > 0 LOOP
    EXECUTE 'ANALYZE ' || part::text;
  END LOOP;
EXCEPTION WHEN lock_not_available THEN NULL;
END $$

-- name: rate_log_times
-- The claims of a queue the rate log holds, oldest first.
SELECT at FROM {claim_log} WHERE queue = %(queue)s ORDER BY at

-- Fair share (migration 0011, store/fair.py, docs/flow-control.md "Fair share").

-- name: fair_set
-- The queue's shares (a JSON object, replacing any it had); the row is made if it has
-- none. Its passes and virtual time are kept (a change of shares applies to what is
-- claimed next).
INSERT INTO {queues} AS q (name, last_used, fair_shares)
VALUES (%(queue)s, {now}, %(shares)s)
ON CONFLICT (name) DO UPDATE SET fair_shares = %(shares)s
RETURNING q.name

-- name: fair_clear
-- The queue no longer fair; its passes and virtual time forgotten.
UPDATE {queues} q SET fair_shares = NULL, fair_pass = NULL, fair_vtime = NULL
WHERE q.name = %(queue)s
RETURNING q.name

-- name: fair_get
SELECT q.fair_shares FROM {queues} q WHERE q.name = %(queue)s
