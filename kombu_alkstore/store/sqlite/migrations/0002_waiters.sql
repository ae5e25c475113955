-- Schema version 2 (84c2e3b): the waiters table (hand-off to idle consumers, used on
-- PostgreSQL only; the layout is the same on both engines).

-- name: waiters
CREATE TABLE IF NOT EXISTS {waiters} (
    pid INTEGER NOT NULL,
    chan INTEGER NOT NULL,
    queue TEXT NOT NULL,
    slots INTEGER NOT NULL,
    PRIMARY KEY (pid, chan, queue)
);

-- name: waiters_queue
CREATE INDEX IF NOT EXISTS "{prefix}waiters_queue" ON {waiters} (queue);
