-- Schema version 17: jobs kept in four generations, one truncated in turn, so the dead
-- row versions a pinned xmin horizon keeps are bounded (issue 35; docs/architecture.md,
-- "Dead rows behind a pinned horizon: rotating generations").
--
-- jobs becomes PARTITION BY LIST (gen) into jobs_g0 .. jobs_g3. A row's generation is
-- the server's clock when it is written: two-second periods, numbered modulo four
-- (generation_at), so nothing is read to route an insert. The maintenance lease holder
-- calls rotate_generation about once a second: the generation that will be current next
-- is locked (never waiting long), its live rows are copied into the current one with
-- their ids, and it is truncated. No statement names a generation; a write by id probes
-- the four primary keys. The primary key is (id, gen), so the partial unique index
-- jobs_unique, which cannot contain gen, goes: unique keys are held in unique_keys since
-- version 15. A version-14 publisher's unique insert names jobs_unique in its
-- ON CONFLICT and fails on this layout: upgrade every publisher past version 14 first.
-- The rows are moved under jobs' lock (a queue table is small unless bloated: VACUUM it
-- first); the table's storage options and grants pass to the new one.

-- name: generation_at
-- The generation current at "at": two-second periods, modulo four.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.generation_at(at TIMESTAMPTZ) RETURNS SMALLINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (floor(extract(epoch FROM at) / 2)::bigint % 4)::smallint $$;
END $migration$

-- name: jobs_generations
DO $migration$
DECLARE
  opts TEXT[];
  seq TEXT;
  g INT;
  r RECORD;
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = '{jobs}'::regclass) = 'p' THEN
    RETURN;
  END IF;
  LOCK TABLE {jobs} IN ACCESS EXCLUSIVE MODE;
  SELECT reloptions INTO opts FROM pg_class WHERE oid = '{jobs}'::regclass;
  seq := pg_get_serial_sequence('{jobs}', 'id');
  -- Their row type is the old table's (version 16 makes them again below).
  DROP FUNCTION IF EXISTS {schema}.delete_rows(BIGINT[], BIGINT[], DOUBLE PRECISION);
  DROP FUNCTION IF EXISTS {schema}.claim_rows(BIGINT[], DOUBLE PRECISION);
  ALTER TABLE {jobs} RENAME CONSTRAINT jobs_pkey TO jobs_plain_pkey;
  ALTER TABLE {jobs} RENAME TO jobs_plain;
  CREATE TABLE {jobs} (
    LIKE {schema}.jobs_plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    gen SMALLINT NOT NULL DEFAULT {schema}.generation_at(statement_timestamp()),
    CONSTRAINT jobs_pkey PRIMARY KEY (id, gen)
  ) PARTITION BY LIST (gen);
  FOR g IN 0..3 LOOP
    EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {jobs} FOR VALUES IN (%s)',
                   'jobs_g' || g, g);
    IF opts IS NOT NULL THEN
      EXECUTE format('ALTER TABLE {schema}.%I SET (%s)', 'jobs_g' || g,
                     array_to_string(opts, ', '));
    END IF;
  END LOOP;
  FOR r IN SELECT a.privilege_type, a.grantee
           FROM pg_class c, aclexplode(c.relacl) a
           WHERE c.oid = '{schema}.jobs_plain'::regclass AND a.grantee <> c.relowner LOOP
    EXECUTE format('GRANT %s ON {jobs} TO %s', r.privilege_type,
                   CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                        ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
  END LOOP;
  INSERT INTO {jobs}
  SELECT p.*, {schema}.generation_at(statement_timestamp()) FROM {schema}.jobs_plain p;
  IF seq IS NOT NULL THEN
    EXECUTE format('ALTER SEQUENCE %s OWNED BY {jobs}.id', seq);
  END IF;
  DROP TABLE {schema}.jobs_plain;
  CREATE INDEX jobs_claim ON {jobs} (queue, priority DESC, run_at, id)
    WHERE queue IS NOT NULL;
  CREATE INDEX jobs_expiring ON {jobs} (expires_at) WHERE expires_at IS NOT NULL;
  CREATE INDEX jobs_processing ON {jobs} (queue) WHERE state = 'processing';
  CREATE INDEX jobs_limit_claimed ON {jobs} (queue, limit_key)
    WHERE state = 'processing' AND limit_key IS NOT NULL;
  CREATE INDEX jobs_fair ON {jobs} (queue, limit_key, priority DESC, run_at, id)
    WHERE limit_key IS NOT NULL;
  CREATE TRIGGER unique_key_take BEFORE INSERT ON {jobs}
    FOR EACH ROW WHEN (NEW.unique_key IS NOT NULL)
    EXECUTE FUNCTION {schema}.unique_key_take();
  CREATE TRIGGER unique_key_free AFTER DELETE ON {jobs}
    FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL)
    EXECUTE FUNCTION {schema}.unique_key_free();
  CREATE TRIGGER unique_key_cleared AFTER UPDATE OF unique_key ON {jobs}
    FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL AND NEW.unique_key IS NULL)
    EXECUTE FUNCTION {schema}.unique_key_free();
END $migration$

-- name: unique_key_take
-- As version 15's, but a job whose own id holds the key keeps it: a rotation copies a
-- unique job forward with its id while its key row stays.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.unique_key_take() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {unique_keys} (queue, key, job_id) VALUES (NEW.queue, NEW.unique_key, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND AND NOT EXISTS (
    SELECT 1 FROM {unique_keys} k
    WHERE k.queue = NEW.queue AND k.key = NEW.unique_key AND k.job_id = NEW.id
  ) THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $$;
END $migration$

-- name: delete_rows
-- Version 16's, for the new row type.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.delete_rows(
  ids BIGINT[], tokens BIGINT[], at DOUBLE PRECISION
) RETURNS SETOF {jobs}
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
  RETURN QUERY
  DELETE FROM {jobs} j USING unnest(ids, tokens) AS h(id, token)
  WHERE j.id = ANY(ids) AND j.id = h.id
    AND (h.token IS NULL OR (j.token = h.token AND j.deadline > at))
  RETURNING j.*;
END $$;
END $migration$

-- name: claim_rows
-- Version 16's, for the new row type.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.claim_rows(
  ids BIGINT[], at DOUBLE PRECISION
) RETURNS SETOF {jobs}
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
  RETURN QUERY
  UPDATE {jobs} j
  SET state = 'processing', attempts = j.attempts + 1,
      token = floor(random() * 9000000000000000000)::bigint,
      deadline = at + j.visibility_timeout, run_at = at + j.visibility_timeout,
      unique_key = CASE WHEN j.unique_claimed THEN j.unique_key END
  WHERE j.id = ANY(ids)
  RETURNING j.*;
END $$;
END $migration$

-- name: rotate_generation
-- One rotation: the generation current next (the oldest) emptied, its live rows copied
-- into the current one with their ids, in one transaction. Its lock is only ever tried
-- without waiting, five times over 30 ms: a lock request that waits queues every claim,
-- publish and ack behind it (a REPEATABLE READ reader holds its lock for as long as its
-- transaction lasts). A generation it cannot lock, or holding more than "cap" live rows (a
-- backlog or delayed jobs, copied again every rotation), is left as it is: nothing is
-- lost, its dead rows only wait for a later rotation or VACUUM. A generation of at most
-- small_bytes (a page by default: a few live jobs, delayed ones, on an idle store) is
-- not worth a TRUNCATE, which makes every session plan its statements again. Runs as
-- its owner, the role that may TRUNCATE. Returns what it did: idle (every generation
-- that small), empty (the oldest is), busy (not locked), kept (over cap) or rotated.
DO $migration$ BEGIN
CREATE OR REPLACE FUNCTION {schema}.rotate_generation(cap INT, small_bytes INT DEFAULT 8192,
                                                     OUT outcome TEXT, OUT moved INT)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  parts REGCLASS[] := ARRAY['{schema}.jobs_g0', '{schema}.jobs_g1', '{schema}.jobs_g2',
                            '{schema}.jobs_g3']::regclass[];
  cur SMALLINT := {schema}.generation_at(clock_timestamp());
  oldest REGCLASS := parts[(cur + 1) % 4 + 1];
  tries INT := 0;
BEGIN
  moved := 0;
  -- No other lock (the parent's, a key's) is waited for longer than this, so a rotation
  -- never holds a DDL (a DROP, a migration) in a deadlock: it gives up first, as "busy".
  PERFORM set_config('lock_timeout', '50ms', true);
  IF pg_relation_size(oldest) <= small_bytes THEN
    outcome := CASE WHEN (SELECT max(pg_relation_size(p)) FROM unnest(parts) p) <= small_bytes
                    THEN 'idle' ELSE 'empty' END;
    RETURN;
  END IF;
  LOOP
    BEGIN
      EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', oldest);
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      tries := tries + 1;
      IF tries = 5 THEN
        outcome := 'busy';
        RETURN;
      END IF;
      PERFORM pg_sleep(0.002 * 2 ^ (tries - 1));  -- 2, 4, 8, 16 ms
    END;
  END LOOP;
  EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s LIMIT $1) AS live', oldest)
    INTO moved USING cap + 1;
  IF moved > cap THEN
    outcome := 'kept';
    RETURN;
  END IF;
  EXECUTE format(
    'INSERT INTO {jobs} (id, queue, msg_id, body, priority, state, run_at, expires_at,
                         attempts, max_attempts, visibility_timeout, backoff_base, deadline,
                         token, created_at, revoked_at, unique_key, unique_claimed,
                         limit_key, gen)
     SELECT id, queue, msg_id, body, priority, state, run_at, expires_at, attempts,
            max_attempts, visibility_timeout, backoff_base, deadline, token, created_at,
            revoked_at, unique_key, unique_claimed, limit_key, $1
     FROM %s', oldest) USING cur;
  EXECUTE format('TRUNCATE %s', oldest);
  outcome := 'rotated';
EXCEPTION WHEN lock_not_available THEN  -- the parent, a key: nothing copied, nothing lost
  outcome := 'busy';
  moved := 0;
END $$;
END $migration$
