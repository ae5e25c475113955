-- Operator acts on record (store/acts.py, migration 0008, docs/operations.md "Acts on
-- record"), loaded with queries.sql. Every value is a bound parameter.

-- fragment: changed_groups
-- A change's rows ("changed": id, queue) as one row per queue: how many, and the first
-- %(cap)s ids, ascending (what an act keeps).
SELECT queue, count(*)::int AS n, (array_agg(id ORDER BY id))[1:%(cap)s] AS ids
FROM changed GROUP BY queue

-- name: act_insert
-- "at" is the column's default: the database's clock, never a bound value.
INSERT INTO {acts} (act, actor, reason, queue, target, job_count, job_ids)
VALUES (%(act)s, %(actor)s, %(reason)s, %(queue)s, %(target)s, %(job_count)s,
        %(job_ids)s::bigint[])

-- name: acts_list
SELECT id, at, act, actor, reason, queue, target, job_count, job_ids FROM {acts}
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s)
  AND (%(act)s::text IS NULL OR act = %(act)s)
  AND (%(since)s::float8 IS NULL OR at >= %(since)s)
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
ORDER BY id DESC LIMIT %(limit)s

-- name: acts_trim_allow
-- Declares the trim's retention for this transaction only (is_local): the acts
-- table's trigger admits the DELETE of a row older than it, and no other.
SELECT set_config('alkstore.acts_retention', (%(retention)s::float8)::text, true) AS retention

-- name: acts_trim
DELETE FROM {acts}
WHERE id IN (
  SELECT id FROM {acts} WHERE at < {now} - %(retention)s::float8 ORDER BY id LIMIT %(batch)s
)
RETURNING id
