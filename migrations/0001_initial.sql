-- jobstream schema: the single source of truth for the data model (docs/design.md, "The data
-- model").
-- Applied at start-up by every process, idempotently and under an advisory lock
-- (jobstream/schema.py); the version below is recorded in schema_version.
-- schema-version: 1

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS tenants (
    id               text PRIMARY KEY,
    name             text NOT NULL,
    -- sha256 hex of the API key; the key itself is never stored.
    api_key_hash     text UNIQUE,
    max_running      integer NOT NULL DEFAULT 16 CHECK (max_running > 0),
    create_rate_per_min integer CHECK (create_rate_per_min > 0),
    -- NULL budget means unlimited. Money is numeric USD, never float.
    budget_usd       numeric(18, 8) CHECK (budget_usd >= 0),
    reserved_usd     numeric(18, 8) NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    spent_usd        numeric(18, 8) NOT NULL DEFAULT 0 CHECK (spent_usd >= 0),
    webhook_secret   text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

INSERT INTO tenants (id, name) VALUES ('default', 'Default tenant') ON CONFLICT (id) DO NOTHING;

CREATE TABLE IF NOT EXISTS jobs (
    id                  uuid PRIMARY KEY,
    tenant_id           text NOT NULL REFERENCES tenants (id),
    idempotency_key     text,
    -- sha256 of the canonical request body: same key + same hash = the same job.
    request_hash        text NOT NULL,
    status              text NOT NULL DEFAULT 'queued' CHECK (status IN
                          ('queued', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled', 'dead')),
    priority            smallint NOT NULL DEFAULT 0,
    provider            text NOT NULL,
    payload             jsonb NOT NULL,
    metadata            jsonb NOT NULL DEFAULT '{}',
    result              jsonb,
    error               jsonb,
    attempts            integer NOT NULL DEFAULT 0,
    -- Attempts handed back at a graceful shutdown: they do not count against max_attempts.
    uncounted_attempts  integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 10),
    -- Fencing token of the current attempt: every write an attempt makes names it.
    run_token           uuid,
    lease_until         timestamptz,
    worker_id           text,
    run_after           timestamptz NOT NULL DEFAULT now(),
    cancel_requested_at timestamptz,
    -- Per-job event sequence; allocated by UPDATE ... RETURNING in the appending transaction.
    last_seq            bigint NOT NULL DEFAULT 0,
    webhook_url         text,
    -- Money: the estimate of one attempt's maximum price, reserved from the tenant's budget at
    -- create; `reserved_usd` is what is still held (0 once charged or released); `charged_usd`
    -- what the tenant paid for the accepted result (once, whatever the retries cost us).
    estimate_usd        numeric(18, 8) NOT NULL DEFAULT 0 CHECK (estimate_usd >= 0),
    reserved_usd        numeric(18, 8) NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    charged_usd         numeric(18, 8),
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key)
);

-- What the claim reads: runnable queued jobs in order, and leases that may have expired.
CREATE INDEX IF NOT EXISTS jobs_queued_idx ON jobs (run_after, priority DESC, created_at)
    WHERE status = 'queued';
-- Does a provider have a runnable job? Asked by every claim that must lock a limited provider.
CREATE INDEX IF NOT EXISTS jobs_queued_provider_idx ON jobs (provider, run_after)
    WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS jobs_leased_idx ON jobs (lease_until)
    WHERE status IN ('running', 'cancelling');
-- The tenant's job list, newest first, keyset-paginated.
CREATE INDEX IF NOT EXISTS jobs_tenant_created_idx ON jobs (tenant_id, created_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS job_attempts (
    job_id         uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt        integer NOT NULL,
    run_token      uuid NOT NULL,
    worker_id      text NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    outcome        text NOT NULL DEFAULT 'running' CHECK (outcome IN
                     ('running', 'succeeded', 'failed', 'unknown', 'cancelled', 'lost', 'interrupted')),
    error_class    text,
    error_detail   text,
    provider       text NOT NULL,
    model          text,
    input_tokens   integer,
    output_tokens  integer,
    cost_usd       numeric(18, 8),
    -- false when the outcome is unknown: cost_usd is then our estimate, not the provider's bill.
    cost_known     boolean NOT NULL DEFAULT true,
    -- For a cancelled attempt: did the provider confirm that it stopped generating?
    cancel_confirmed boolean,
    PRIMARY KEY (job_id, attempt)
);

CREATE INDEX IF NOT EXISTS job_attempts_running_idx ON job_attempts (provider)
    WHERE outcome = 'running';

CREATE TABLE IF NOT EXISTS job_events (
    job_id     uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    attempt    integer NOT NULL,
    type       text NOT NULL CHECK (type IN
                 ('status', 'reset', 'token', 'usage', 'result', 'attempt_error', 'done')),
    data       jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, seq)
);

-- Provider-wide coordination across every worker: claims for a provider with a concurrency
-- limit lock its row (jobstream/queries.py, LOCK_PROVIDERS), and a 429 pauses it.
CREATE TABLE IF NOT EXISTS provider_state (
    provider     text PRIMARY KEY,
    paused_until timestamptz,
    -- When the latest pause was set: the moment after which no worker claims for the provider.
    paused_at    timestamptz
);
-- Databases made before paused_at existed. Only when it is missing: ALTER TABLE takes an
-- exclusive lock even with IF NOT EXISTS, and taking it at every start-up, after the CREATE
-- INDEXes above have locked `jobs`, deadlocks with a running worker's claim (which locks
-- provider_state, then jobs).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = 'provider_state'::regclass AND attname = 'paused_at'
                      AND NOT attisdropped) THEN
        ALTER TABLE provider_state ADD COLUMN paused_at timestamptz;
    END IF;
END
$$;

-- The webhook outbox: written in the transaction that finishes the job.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id               bigserial PRIMARY KEY,
    job_id           uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    event            text NOT NULL,
    url              text NOT NULL,
    payload          jsonb NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';

INSERT INTO schema_version (version) VALUES (1) ON CONFLICT (version) DO NOTHING;
