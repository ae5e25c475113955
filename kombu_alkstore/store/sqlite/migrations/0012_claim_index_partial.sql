-- Schema version 12: nothing changes on SQLite. (On PostgreSQL the claim index becomes
-- partial, so that a lookup by id can use only the primary key whatever ANALYZE found.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
