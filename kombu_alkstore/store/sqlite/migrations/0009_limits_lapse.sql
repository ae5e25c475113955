-- Schema version 9: nothing changes on SQLite. (On PostgreSQL, a heartbeat in flight
-- across its deadline could let a limited queue go over its limit; SQLite has one writer
-- at a time, so a claim and a heartbeat never overlap.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
