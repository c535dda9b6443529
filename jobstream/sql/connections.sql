-- Connections and the schema's version: the liveness probe (server/health.py and the LISTEN
-- connection, jobstream/listener.py) and what jobstream/migrations.py reads and writes.

-- name: PING
-- A liveness probe: readiness, and the LISTEN connection's check that it is still alive.
SELECT 1

-- name: LOCK_SCHEMA
-- migrations.apply_schema holds it for its transaction: one process at a time changes tables.
SELECT pg_advisory_xact_lock($1)

-- name: HAS_SCHEMA
-- Has jobstream touched this database? pg_class read under this statement's snapshot, which
-- neither fails on a missing table nor trusts the backend's catalog cache. to_regclass did: a
-- transaction that waited on LOCK_SCHEMA while another process created the schema did not see
-- it (a backend refreshes its cache when it takes a table lock, and an advisory lock is none),
-- ran schema.sql again and, once schema.sql created a type, failed to start. Reading pg_class
-- takes a table lock, so the statements after this one see the schema too.
SELECT EXISTS (SELECT FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relname = 'schema_version' AND n.nspname = current_schema())

-- name: SCHEMA_VERSION
SELECT max(version) FROM schema_version

-- name: RECORD_SCHEMA_VERSION
INSERT INTO schema_version (version) VALUES ($1) ON CONFLICT (version) DO NOTHING
