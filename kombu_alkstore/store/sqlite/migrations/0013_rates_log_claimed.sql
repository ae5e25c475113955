-- Schema version 13: nothing changes on SQLite, whose claims take the file's write lock
-- before they read: a claim logs exactly what it takes. (On PostgreSQL the rates'
-- log is written by the claim for the jobs it took, not by limited_due for its picks.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
