-- Schema version 15: nothing changes on SQLite, whose jobs table is one table and keeps
-- its unique index jobs_unique. (On PostgreSQL the keys move to a table of their own,
-- unique_keys, kept by triggers, so that jobs can later be split into generations.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
