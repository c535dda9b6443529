-- Connections and the schema's version: the liveness probe (server/health.py and the LISTEN
-- connection, jobstream/listener.py) and what jobstream/migrations.py reads and writes.

-- name: PING
-- A liveness probe: readiness, and the LISTEN connection's check that it is still alive.
SELECT 1

-- name: LOCK_SCHEMA
-- migrations.apply_schema holds it for its transaction: one process at a time changes tables.
SELECT pg_advisory_xact_lock($1)

-- name: HAS_SCHEMA
-- Has jobstream touched this database? to_regclass neither locks nor fails on a missing table.
SELECT to_regclass('schema_version') IS NOT NULL

-- name: SCHEMA_VERSION
SELECT max(version) FROM schema_version

-- name: RECORD_SCHEMA_VERSION
INSERT INTO schema_version (version) VALUES ($1) ON CONFLICT (version) DO NOTHING
