-- Schema version 2 (84c2e3b): the waiters table, idle consumers a publisher may hand a
-- new job to directly; one row per (LISTEN backend, kombu channel, queue). pid also
-- names the advisory lock that backend holds while it lives.

-- name: waiters
CREATE TABLE IF NOT EXISTS {waiters} (
    pid INTEGER NOT NULL,
    chan INTEGER NOT NULL,
    queue TEXT NOT NULL,
    slots INTEGER NOT NULL,
    PRIMARY KEY (pid, chan, queue)
);

-- name: waiters_queue
CREATE INDEX IF NOT EXISTS waiters_queue ON {waiters} (queue);

-- name: jobs_autovacuum
-- Tables created by the very first version 1 (6197933, before 498cde6) lack the jobs
-- table's autovacuum settings that every later install has: set them (idempotent).
-- (Only on jobs as one table: jobs split into generations, version 17, keeps them on
-- each generation, so the printed setup script still runs on tables at that version.)
DO $$
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = '{jobs}'::regclass) = 'r' THEN
    ALTER TABLE {jobs} SET (
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000,
        autovacuum_analyze_scale_factor = 0.02
    );
  END IF;
END $$
