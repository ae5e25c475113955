-- Operator acts on record (store/acts.py, migration 0008, docs/operations.md "Acts on
-- record"), loaded with queries.sql. Every value is a bound parameter.

-- fragment: db_now
-- The database's clock in epoch seconds, as the acts table's default and triggers read it.
((julianday('now') - 2440587.5) * 86400.0)

-- name: act_insert
-- "at" is the column's default: the database's clock, never a bound value.
INSERT INTO {acts} (act, actor, reason, queue, target, job_count, job_ids)
VALUES (:act, :actor, :reason, :queue, :target, :job_count, :job_ids)

-- name: acts_list
SELECT id, at, act, actor, reason, queue, target, job_count, job_ids FROM {acts}
WHERE (:queue IS NULL OR queue = :queue)
  AND (:actor IS NULL OR actor = :actor)
  AND (:act IS NULL OR act = :act)
  AND (:since IS NULL OR at >= :since)
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC LIMIT :limit

-- name: acts_trim_allow
-- Declares the trim's retention (meta 'acts_retention'), in the trim's write transaction:
-- the acts table's trigger admits the DELETE of a row older than it, and no other.
INSERT INTO {meta} ("key", value) VALUES ('acts_retention', CAST(:retention AS TEXT))
ON CONFLICT ("key") DO UPDATE SET value = excluded.value

-- name: acts_trim
DELETE FROM {acts}
WHERE id IN (
  SELECT id FROM {acts} WHERE at < {db_now} - :retention ORDER BY id LIMIT :batch
)
RETURNING id
