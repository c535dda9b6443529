-- Version 1 to 2: a claim whose cost does not grow with the backlog, and a sharded ledger.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

-- Databases made by early version-1 builds, before paused_at existed.
ALTER TABLE provider_state ADD COLUMN IF NOT EXISTS paused_at timestamptz;

-- The claim's index: queues (tenant, provider, priority), each read as a range up to now.
DROP INDEX IF EXISTS jobs_queued_idx;
CREATE INDEX IF NOT EXISTS jobs_runnable_idx
    ON jobs (tenant_id, provider, priority, run_after, created_at)
    WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS jobs_active_tenant_idx ON jobs (tenant_id)
    WHERE status IN ('running', 'cancelling');

ALTER TABLE tenants ADD COLUMN IF NOT EXISTS last_claimed_at timestamptz;

-- Per-row foreign-key checks on the two hottest inserts (schema.sql says why each is safe).
ALTER TABLE job_events DROP CONSTRAINT IF EXISTS job_events_job_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_tenant_id_fkey;

-- The ledger moves from one row per tenant to 16 shards; the totals move to shard 0.
CREATE TABLE IF NOT EXISTS tenant_ledger (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    shard        smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    reserved_usd numeric(18, 8) NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    spent_usd    numeric(18, 8) NOT NULL DEFAULT 0 CHECK (spent_usd >= 0),
    PRIMARY KEY (tenant_id, shard)
);
-- Each job's reservation goes to the shard its id picks, so that its release finds it there;
-- what was spent goes to shard 0.
INSERT INTO tenant_ledger (tenant_id, shard, reserved_usd)
SELECT tenant_id, get_byte(uuid_send(id), 15) % 16, sum(reserved_usd)
  FROM jobs
 WHERE reserved_usd > 0
 GROUP BY 1, 2
ON CONFLICT (tenant_id, shard) DO UPDATE SET reserved_usd = EXCLUDED.reserved_usd;
INSERT INTO tenant_ledger (tenant_id, shard, spent_usd)
SELECT id, 0, spent_usd FROM tenants WHERE spent_usd > 0
ON CONFLICT (tenant_id, shard) DO UPDATE SET spent_usd = EXCLUDED.spent_usd;
ALTER TABLE tenants DROP COLUMN IF EXISTS reserved_usd, DROP COLUMN IF EXISTS spent_usd;

-- Routines live in schema.sql alone: tenant_balances and job_webhook_payload, which this version
-- brought, are there, and jobstream/migrations.py runs them after the migrations.
