-- Schema version 17: nothing changes on SQLite, which keeps no old row versions for
-- readers: a deleted row's space is free at once, whatever transaction is open. (On
-- PostgreSQL jobs becomes four generations, one truncated in turn, so the dead rows a
-- pinned xmin horizon keeps are bounded.)

-- name: nothing
-- (The runner refuses a migration without a statement, a packaging mistake elsewhere.)
SELECT 1
