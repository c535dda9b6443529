-- Version 14 to 15: the second hardening pass.
-- - A tenant's running limit may be NULL: a fair share of the fleet's slots (claim_jobs), which
--   the fleet's `workers` rows measure. The old default, 16, becomes that share: a limit above a
--   worker's slots let one tenant take them all.
-- - API keys rotate and are revoked (jobstream/tenants.py): the key's generation, and the
--   previous key, valid until its grace period ends.
-- - A tenant's stored bytes (the inputs of its jobs) are booked on its ledger shards, so that a
--   create checks its storage bound by reading 16 rows; a job carries what it booked.
-- - A tombstone remembers the idempotency key of the job it replaces, and its request hash: a
--   key is not free again while the tombstone is kept.
-- claim_jobs and delete_jobs change their arguments or results: dropped here, made again from
-- schema.sql's routines. Workers of version 14 call the old claim_jobs: stop them first.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP FUNCTION IF EXISTS claim_jobs(text[], text, float8, timestamptz, text[], integer[], text[], integer, text[]);
DROP FUNCTION IF EXISTS delete_jobs(uuid[]);

ALTER TABLE tenants ALTER COLUMN max_running DROP NOT NULL;
ALTER TABLE tenants ALTER COLUMN max_running DROP DEFAULT;
UPDATE tenants SET max_running = NULL WHERE max_running = 16;
ALTER TABLE tenants ADD COLUMN key_generation integer NOT NULL DEFAULT 1;
ALTER TABLE tenants ADD COLUMN previous_key_hash text UNIQUE;
ALTER TABLE tenants ADD COLUMN previous_key_until timestamptz;

ALTER TABLE tenant_ledger ADD COLUMN stored_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN input_bytes integer NOT NULL DEFAULT 0;

ALTER TABLE job_tombstones ADD COLUMN idempotency_key text;
ALTER TABLE job_tombstones ADD COLUMN request_hash text;
CREATE INDEX job_tombstones_key_idx ON job_tombstones (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE workers (
    id            text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    version       text NOT NULL,
    job_names     text[] NOT NULL,
    slots         integer NOT NULL CHECK (slots > 0),
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    stopped_at    timestamptz
);
