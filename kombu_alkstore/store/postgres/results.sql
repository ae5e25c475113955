-- The result backend's statements on PostgreSQL (kombu_alkstore.results; tables of
-- migration 0004). Loaded by store/postgres/results.py; every value is a bound parameter.

-- name: get_many
-- The values of the keys asked for that have not expired (one statement for any number
-- of waiters: the listener's batched read).
SELECT key, value FROM {results}
WHERE key = ANY(%(keys)s) AND (expires_at IS NULL OR expires_at > %(now)s);

-- name: put
-- Store (or replace) one key; a task's key also NOTIFYs the results channel with its task
-- id (and its value, when small), delivered to every listening process at commit. With keep_success, a live SUCCESS
-- is never replaced (Celery's rule against a lost worker's late state overwriting a
-- result; checked here, in the same statement, rather than by a read first).
WITH up AS (
    INSERT INTO {results} AS r (key, task_id, state, value, stored_at, expires_at)
    VALUES (%(key)s, %(task_id)s, %(state)s, %(value)s, %(now)s, %(expires_at)s)
    ON CONFLICT (key) DO UPDATE SET
        task_id = excluded.task_id, state = excluded.state, value = excluded.value,
        stored_at = excluded.stored_at, expires_at = excluded.expires_at
    WHERE NOT %(keep_success)s OR r.state IS DISTINCT FROM 'SUCCESS'
        OR r.expires_at <= %(now)s
    RETURNING r.task_id, r.value
)
-- The payload: [task id, value in base64] (a JSON array), or [task id] when the value
-- would not fit in a notification (8,000 bytes): the listener reads it then.
SELECT pg_notify(
    %(results_channel)s,
    CASE WHEN octet_length(value) <= 4800
        THEN json_build_array(task_id, encode(value, 'base64'))::text
        ELSE json_build_array(task_id)::text
    END
) FROM up WHERE task_id IS NOT NULL;

-- name: delete
DELETE FROM {results} WHERE key = ANY(%(keys)s);

-- name: expire
-- A key's new lifetime (Celery's expire(key, seconds); NULL: never).
UPDATE {results} SET expires_at = %(expires_at)s WHERE key = %(key)s;

-- name: cleanup
-- Up to %(batch)s expired results and as many expired chords with their parts, in one
-- statement (repeated while a batch was full: see results.py).
WITH r AS (
    -- the condition again on the row deleted: one stored anew meanwhile (its DELETE
    -- waited for the row and reads its new version) is kept
    DELETE FROM {results} WHERE key IN (
        SELECT key FROM {results} WHERE expires_at IS NOT NULL AND expires_at <= %(now)s
        LIMIT %(batch)s)
      AND expires_at IS NOT NULL AND expires_at <= %(now)s
    RETURNING 1
), c AS (
    DELETE FROM {chords} WHERE group_id IN (
        SELECT group_id FROM {chords} WHERE expires_at IS NOT NULL AND expires_at <= %(now)s
        LIMIT %(batch)s)
      AND expires_at IS NOT NULL AND expires_at <= %(now)s
    RETURNING group_id
), p AS (
    DELETE FROM {chord_parts} WHERE group_id IN (SELECT group_id FROM c) RETURNING 1
)
SELECT (SELECT count(*) FROM r) AS results, (SELECT count(*) FROM c) AS chords,
       (SELECT count(*) FROM p) AS parts;

-- name: chord_size
-- set_chord_size: the header's length. A chord that fired before (a frozen chord applied
-- again reuses its group id) starts a new count; parts of this run that came first count:
-- a fired chord's parts are deleted when it fires (chord_done), so the parts recorded
-- since are this run's (a late duplicate of the last run's is taken for one of them).
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
VALUES (%(group_id)s, %(size)s, 0, 0, false, %(now)s, %(expires_at)s)
ON CONFLICT (group_id) DO UPDATE SET
    size = excluded.size,
    extra = CASE WHEN c.fired THEN 0 ELSE c.extra END,
    done = CASE WHEN c.fired
                THEN (SELECT count(*) FROM {chord_parts} p WHERE p.group_id = c.group_id)
                ELSE c.done END,
    fired = false, expires_at = excluded.expires_at;

-- name: chord_add
-- add_to_chord: a header task replaced itself by more work; one more part to wait for.
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
VALUES (%(group_id)s, NULL, %(count)s, 0, false, %(now)s, %(expires_at)s)
ON CONFLICT (group_id) DO UPDATE SET extra = c.extra + excluded.extra;

-- name: chord_step
-- One header result, in one statement: the part is recorded at most once per (header
-- index, task id) (a redelivered header task never counts twice), and only a new part
-- counts, on the chord's row (made if the part came before set_chord_size: a fast header
-- task can). ON CONFLICT DO UPDATE locks the row and counts on its newest version, so
-- parts of one chord count one at a time; fired is true for the one part that completed
-- the count (size known and every part recorded), no row for the others.
WITH ins AS (
    INSERT INTO {chord_parts} (group_id, idx, task_id, value)
    VALUES (%(group_id)s, %(idx)s, %(task_id)s, %(value)s)
    ON CONFLICT DO NOTHING
    RETURNING group_id
)
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
SELECT group_id, NULL, 0, 1, false, %(now)s, %(expires_at)s FROM ins
ON CONFLICT (group_id) DO UPDATE SET
    done = c.done + 1,
    fired = (c.size IS NOT NULL AND c.done + 1 >= c.size + c.extra)
WHERE NOT c.fired
RETURNING c.fired;

-- name: chord_parts
-- A fired chord's header results, in header order.
SELECT value FROM {chord_parts} WHERE group_id = %(group_id)s ORDER BY idx, seq;

-- name: chord_done
-- After the callback's publish: the parts are no longer needed (the fired row stays until
-- it expires, so a late duplicate of a header task cannot fire it again).
DELETE FROM {chord_parts} WHERE group_id = %(group_id)s;

-- name: chord_get
SELECT size, extra, done, fired FROM {chords} WHERE group_id = %(group_id)s;

-- name: by_task
-- A task's stored rows by its id (the dashboard's result page), expired ones included.
SELECT key, state, value, stored_at, expires_at FROM {results}
WHERE task_id = %(task_id)s ORDER BY stored_at DESC LIMIT 10;
