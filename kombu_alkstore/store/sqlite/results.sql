-- The result backend's statements on SQLite (kombu_alkstore.results; tables of migration
-- 0004). Loaded by store/sqlite/results.py; lists are bound as JSON arrays.

-- name: get_many
SELECT key, value FROM {results}
WHERE key IN (SELECT value FROM json_each(:keys))
  AND (expires_at IS NULL OR expires_at > :now);

-- name: put
INSERT INTO {results} (key, task_id, state, value, stored_at, expires_at)
VALUES (:key, :task_id, :state, :value, :now, :expires_at)
ON CONFLICT (key) DO UPDATE SET
    task_id = excluded.task_id, state = excluded.state, value = excluded.value,
    stored_at = excluded.stored_at, expires_at = excluded.expires_at
WHERE NOT :keep_success OR {results}.state IS NOT 'SUCCESS' OR {results}.expires_at <= :now;

-- name: delete
DELETE FROM {results} WHERE key IN (SELECT value FROM json_each(:keys));

-- name: expire
UPDATE {results} SET expires_at = :expires_at WHERE key = :key;

-- name: cleanup_results
-- Up to :batch expired results (repeated while a batch was full: see results.py).
DELETE FROM {results} WHERE key IN (
    SELECT key FROM {results} WHERE expires_at IS NOT NULL AND expires_at <= :now
    LIMIT :batch
) AND expires_at IS NOT NULL AND expires_at <= :now;

-- name: cleanup_parts
-- The parts of the :batch first expired chords, which cleanup_chords then deletes (the
-- same rows: one write transaction, by group_id).
DELETE FROM {chord_parts} WHERE group_id IN (
    SELECT group_id FROM {chords} WHERE expires_at IS NOT NULL AND expires_at <= :now
    ORDER BY group_id LIMIT :batch
);

-- name: cleanup_chords
DELETE FROM {chords} WHERE group_id IN (
    SELECT group_id FROM {chords} WHERE expires_at IS NOT NULL AND expires_at <= :now
    ORDER BY group_id LIMIT :batch
);

-- name: chord_size
-- set_chord_size: the header's length. A chord that fired before (a frozen chord applied
-- again reuses its group id) starts a new count; parts of this run that came first count:
-- a fired chord's parts are deleted when it fires (chord_done), so the parts recorded
-- since are this run's (a late duplicate of the last run's is taken for one of them).
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
VALUES (:group_id, :size, 0, 0, 0, :now, :expires_at)
ON CONFLICT (group_id) DO UPDATE SET
    size = excluded.size,
    extra = CASE WHEN c.fired THEN 0 ELSE c.extra END,
    done = CASE WHEN c.fired
                THEN (SELECT count(*) FROM {chord_parts} p WHERE p.group_id = c.group_id)
                ELSE c.done END,
    fired = 0, expires_at = excluded.expires_at;

-- name: chord_add
-- add_to_chord: a header task replaced itself by more work; one more part to wait for.
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
VALUES (:group_id, NULL, :count, 0, 0, :now, :expires_at)
ON CONFLICT (group_id) DO UPDATE SET extra = c.extra + excluded.extra;

-- name: chord_lock
-- Under BEGIN IMMEDIATE (the file's write lock). The first statement of a part's transaction: the chord's row, made if the part came
-- before set_chord_size, and locked until commit (parts of one chord count one by one).
INSERT INTO {chords} AS c (group_id, size, extra, done, fired, created_at, expires_at)
VALUES (:group_id, NULL, 0, 0, 0, :now, :expires_at)
ON CONFLICT (group_id) DO UPDATE SET group_id = c.group_id
RETURNING fired;

-- name: chord_insert_part
-- At most once per (header index, task id): a redelivered header task never counts twice.
INSERT INTO {chord_parts} (group_id, idx, task_id, seq, value)
SELECT :group_id, :idx, :task_id,
       (SELECT coalesce(max(seq), 0) + 1 FROM {chord_parts} WHERE group_id = :group_id),
       :value
WHERE true
ON CONFLICT DO NOTHING
RETURNING 1 AS inserted;

-- name: chord_count
-- fired: this part completed the chord (size known and every part recorded).
UPDATE {chords} SET done = done + 1,
    fired = (size IS NOT NULL AND done + 1 >= size + extra)
WHERE group_id = :group_id AND NOT fired
RETURNING fired;

-- name: chord_parts
-- A fired chord's header results, in header order.
SELECT value FROM {chord_parts} WHERE group_id = :group_id ORDER BY idx, seq;

-- name: chord_done
-- After the callback's publish: the parts are no longer needed (the fired row stays until
-- it expires, so a late duplicate of a header task cannot fire it again).
DELETE FROM {chord_parts} WHERE group_id = :group_id;

-- name: chord_get
SELECT size, extra, done, fired FROM {chords} WHERE group_id = :group_id;

-- name: by_task
SELECT key, state, value, stored_at, expires_at FROM {results}
WHERE task_id = :task_id ORDER BY stored_at DESC LIMIT 10;
