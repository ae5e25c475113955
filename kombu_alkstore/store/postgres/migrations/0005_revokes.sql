-- Schema version 5: revokes kept in a table of their own (issue 29, defect 4).
--
-- A revoke used to be an UPDATE of jobs.revoked_at, which locked the task's job rows until
-- the revoking transaction committed: a revoke inside kombu_alkstore.transaction() held
-- the lock for as long as the caller's request, and the heartbeat of the worker holding
-- that job waited on it, with everything pipelined behind it. An INSERT here locks no job.
-- jobs.revoked_at stays, still read: marks a version-4 store made keep their meaning.

-- name: revokes
CREATE TABLE IF NOT EXISTS {revokes} (
    msg_id TEXT NOT NULL,
    revoked_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (msg_id)
);
