-- Schema version 14: a rated claim reads its windows' use from ordinals, two index
-- probes each, not a count of the window's rows (see the PostgreSQL migration of the
-- same number). claim_log rows get n, consecutive per queue, and kn, consecutive per
-- (queue, limit_key); "at" never decreases along them. The trigger numbers every insert
-- inside the inserting claim's write transaction (so whatever version of the package
-- logs), and the trim deletes the oldest rows: a queue's rows are one run of ordinals.

-- name: claim_log_n
ALTER TABLE {claim_log} ADD COLUMN n INTEGER

-- name: claim_log_kn
ALTER TABLE {claim_log} ADD COLUMN kn INTEGER

-- name: claim_log_numbered
-- The rows logged before this version, numbered in their order.
UPDATE {claim_log} SET n = r.n, kn = r.kn
FROM (SELECT x.rowid AS row_id,
             row_number() OVER (PARTITION BY x.queue ORDER BY x.at, x.rowid) AS n,
             CASE WHEN x.limit_key IS NOT NULL THEN
               row_number() OVER (PARTITION BY x.queue, x.limit_key ORDER BY x.at, x.rowid)
             END AS kn
      FROM {claim_log} x) r
WHERE {claim_log}.rowid = r.row_id AND {claim_log}.n IS NULL

-- name: claim_log_number
CREATE TRIGGER IF NOT EXISTS "{prefix}claim_log_number" AFTER INSERT ON {claim_log}
BEGIN
  UPDATE {claim_log} SET
    at = max(NEW.at, COALESCE(
      (SELECT x.at FROM {claim_log} x WHERE x.queue = NEW.queue AND x.n IS NOT NULL
       ORDER BY x.at DESC, x.n DESC LIMIT 1), NEW.at)),
    n = COALESCE(
      (SELECT x.n FROM {claim_log} x WHERE x.queue = NEW.queue AND x.n IS NOT NULL
       ORDER BY x.at DESC, x.n DESC LIMIT 1), 0) + 1,
    kn = CASE WHEN NEW.limit_key IS NOT NULL THEN COALESCE(
      (SELECT x.kn FROM {claim_log} x
       WHERE x.queue = NEW.queue AND x.limit_key = NEW.limit_key AND x.kn IS NOT NULL
       ORDER BY x.at DESC, x.kn DESC LIMIT 1), 0) + 1 END
  WHERE rowid = NEW.rowid;
END

-- name: claim_log_order
CREATE INDEX IF NOT EXISTS "{prefix}claim_log_order" ON {claim_log} (queue, at, n)

-- name: claim_log_key_order
CREATE INDEX IF NOT EXISTS "{prefix}claim_log_key_order" ON {claim_log} (queue, limit_key, at, kn)
WHERE limit_key IS NOT NULL

-- name: claim_log_queue_retired
DROP INDEX IF EXISTS "{prefix}claim_log_queue"

-- name: claim_log_key_retired
DROP INDEX IF EXISTS "{prefix}claim_log_key"
