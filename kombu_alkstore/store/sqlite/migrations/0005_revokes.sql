-- Schema version 5: revokes kept in a table of their own (issue 29, defect 4; see the
-- PostgreSQL migration). jobs.revoked_at stays, still read (version-4 marks).

-- name: revokes
CREATE TABLE IF NOT EXISTS {revokes} (
    msg_id TEXT NOT NULL PRIMARY KEY,
    revoked_at DOUBLE NOT NULL
);
