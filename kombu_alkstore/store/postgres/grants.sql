-- The least privileges of a runtime role whose tables a migration role made, printed by
-- `kombu-alkstore setup --print --grant ROLE` (store/setup_script.py). {schema} and
-- {role} are validated identifiers, quoted.

-- name: grants
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
-- tables a later migration adds (run by the same migration role) get them too
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role};
