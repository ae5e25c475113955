-- Statements of the migration runner (store/migrate.py), the same on every engine.
-- Slots: {meta} (the meta table), {version} (a migration's number, from its file name),
-- {complete} (a condition: the layout really is at {version}).

-- name: record
-- The version a migration brought the tables to, written in the migration's own
-- transaction. Never lowers a stored version (an older package's script run on tables a
-- newer one migrated leaves them at the newer version).
INSERT INTO {meta} AS m (key, value) VALUES ('schema_version', '{version}')
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE CAST(m.value AS INTEGER) < CAST(excluded.value AS INTEGER);

-- name: record_if_complete
-- As record, for a printed script that cannot add columns (SQLite): stamps {version}
-- only when {complete} holds, so a file it could not upgrade keeps its version.
INSERT INTO {meta} AS m (key, value) VALUES ('schema_version', '{version}')
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE CAST(m.value AS INTEGER) < CAST(excluded.value AS INTEGER) AND {complete};

-- name: columns
-- Any engine: no rows, only the columns {table} has now (the cursor's description). Run
-- before an ADD COLUMN without IF NOT EXISTS (SQLite), which is skipped when the column
-- is already there (a layout between versions, e.g. an interrupted manual upgrade).
SELECT * FROM {table} LIMIT 0;

-- name: column_exists
-- SQLite: {table} (the stored table name, unquoted) has the column {column}.
EXISTS (SELECT 1 FROM pragma_table_info('{table}') WHERE name = '{column}');

-- name: sqlite_layout
-- SQLite: the tables and indexes a database holds, as SQL, in the order they were made
-- (the printed SQLite setup script is the migrations' final layout, read back this way).
SELECT type, sql FROM sqlite_master
WHERE sql IS NOT NULL AND type IN ('table', 'index') AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
ORDER BY rowid;
