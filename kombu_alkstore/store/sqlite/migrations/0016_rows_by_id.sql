-- Schema version 16: nothing changes on SQLite, whose planner, without the ANALYZE
-- statistics the store never gathers, does not weigh a table's size: a lookup by id is
-- always the primary key. (On PostgreSQL a claim's and an ack's writes by id
-- move into functions planned without sequential scans, so a plan made while jobs was
-- empty does not scan it whole once it is large.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
