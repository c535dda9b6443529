-- jobstream schema: the single source of truth for the data model (docs/design.md, "The data
-- model").
-- A fresh database gets this file whole; an older one gets the migrations/ after its recorded
-- version and then the routines at the end of this file (jobstream/migrations.py,
-- docs/architecture.md). Change a table in both: a test checks that the migrations lead to
-- exactly this schema.
-- schema-version: 23

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS tenants (
    id               text PRIMARY KEY,
    name             text NOT NULL,
    -- sha256 hex of the API key; the key itself is never stored.
    api_key_hash     text UNIQUE,
    -- Bumped by every rotation and revocation: an events token names the generation it was
    -- issued under and dies with it (server/stream_tokens.py).
    key_generation   integer NOT NULL DEFAULT 1,
    -- The key a rotation replaced, still accepted until previous_key_until (the grace period).
    previous_key_hash  text UNIQUE,
    previous_key_until timestamptz,
    -- NULL: a fair share of the fleet's slots (claim_jobs), never all of them while another
    -- tenant could want one.
    max_running      integer CHECK (max_running > 0),
    create_rate_per_min integer CHECK (create_rate_per_min > 0),
    -- NULL budget means unlimited. Money is numeric USD, never float. What is reserved and
    -- spent lives in tenant_ledger, sharded, so that no single row is written by every job.
    budget_usd       numeric(18, 8) CHECK (budget_usd >= 0),
    webhook_secret   text,
    -- When a claim last took a job of this tenant: tenants with as many running jobs take turns
    -- in this order (the claim's post-check locks the row anyway, so writing it costs no lock).
    last_claimed_at  timestamptz,
    -- The longest a job of this tenant is kept after it ends, seconds (NULL: no cap): caps the
    -- job's retain_s and JOBSTREAM_RETENTION_S.
    max_retain_s     integer CHECK (max_retain_s > 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);

INSERT INTO tenants (id, name) VALUES ('default', 'Default tenant') ON CONFLICT (id) DO NOTHING;

-- A tenant's money, in 16 shards per tenant. Every booking goes to the shard of the connection
-- that writes it, pg_backend_pid() % 16 (jobstream/sql/ledger.sql says why), so a job's
-- reservation and its release may meet different rows: a row's reserved_usd may be negative,
-- the tenant's sum never is. A single row per tenant serialised every create and every
-- completion of a tenant behind one row lock held until commit (about 600 commits/s here).
CREATE TABLE IF NOT EXISTS tenant_ledger (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    shard        smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    reserved_usd numeric(18, 8) NOT NULL DEFAULT 0,
    spent_usd    numeric(18, 8) NOT NULL DEFAULT 0 CHECK (spent_usd >= 0),
    -- The bytes of the inputs of the tenant's jobs (jobs.input_bytes), booked with the
    -- reservation and given back when retention deletes the job: the storage bound's measure.
    stored_bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, shard)
);

CREATE TABLE IF NOT EXISTS jobs (
    id                  uuid PRIMARY KEY,
    -- No foreign key: every insert (queries.INSERT_JOBS) reads the tenant's row and inserts
    -- nothing without it, and tenants are never deleted. The per-row check cost 15 % of a batch
    -- create.
    tenant_id           text NOT NULL,
    -- The create's Idempotency-Key, as the job's representation shows it. Unique per tenant in
    -- tenant_jobs, not here (tenant_jobs says why).
    idempotency_key     text,
    -- sha256 of the canonical request body: same key + same hash = the same job. '' for a job
    -- made without a key, whose body nothing compares (jobstream/new_jobs.py, NewJob).
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
    -- How many characters of attempt `text_attempt`'s text are in the log (another attempt's
    -- count reads as 0). A token append names the offset it expects and lands only there
    -- (queries.APPEND_TOKENS): a write in doubt that commits late cannot store its text twice.
    text_attempt        integer NOT NULL DEFAULT 0,
    text_chars          bigint NOT NULL DEFAULT 0,
    webhook_url         text,
    -- Money: the estimate of one attempt's maximum price, reserved from the tenant's budget at
    -- create; `reserved_usd` is what is still held (0 once charged or released); `charged_usd`
    -- what the tenant paid for the accepted result (once, whatever the retries cost us).
    estimate_usd        numeric(18, 8) NOT NULL DEFAULT 0 CHECK (estimate_usd >= 0),
    reserved_usd        numeric(18, 8) NOT NULL DEFAULT 0 CHECK (reserved_usd >= 0),
    charged_usd         numeric(18, 8),
    -- An operator's retry of a dead job is a new job: `retry_of` names the dead one on the new
    -- job, `retried_as` the new one on the dead job (set once, under the dead job's row lock).
    -- Each job keeps one log ending in one `done` and sends one terminal webhook. No foreign
    -- keys: retention deletes jobs, and a link to a pruned job reads as a 404.
    retry_of            uuid,
    retried_as          uuid,
    -- Retention (docs/retention.md): how long to keep the job after it ends, seconds, as the
    -- create asked (NULL: JOBSTREAM_RETENTION_S); the tenant's max_retain_s caps it. The
    -- janitor sets expires_at when it settles the finished job (compacts its log), and deletes
    -- the job, its attempts, events and webhook rows once it has passed. Not in any index the
    -- writers of running jobs touch, so token appends stay HOT updates.
    retain_s            integer,
    expires_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- The job's name (`@app.job`, jobstream/app.py); `llm` is the built-in prompt-to-model job.
    -- A worker claims only the names it runs (claim_jobs below).
    job_name            text NOT NULL DEFAULT 'llm',
    -- The bytes of payload and metadata as the create booked them on the tenant's ledger.
    input_bytes         integer NOT NULL DEFAULT 0,
    -- The create's trace context as a W3C traceparent, when the server traced the create
    -- (docs/deployment.md, "Traces"): the worker's attempts continue that trace. NULL with
    -- traces off, which costs the row nothing (a bit of its null bitmap).
    traceparent         text
-- A fifth of each page left free: a running job's row is rewritten by every token write, and a
-- rewrite that fits on its page is a HOT update (no index touched) when no indexed column
-- changes. On full pages every token write moved its rows: for 1,000 streams, 6.8 WAL records
-- and 990 bytes a row instead of 1.0 and 130, and the UPDATE took 15.5 ms instead of 3.2.
) WITH (fillfactor = 80);

-- The claim's index. Its leading columns name a queue, (tenant, provider, job name, priority): the claim
-- skips from queue to queue, then reads each queue's head as a range bounded by run_after <= now.
-- Both cost the same with 100 or 100,000 jobs queued, and a delayed job is never read before its
-- time (claim_jobs below). It also answers "does a provider have a runnable job?" (claim_jobs'
-- step 1), queue by queue, which an index of its own on (provider,
-- run_after) answered until schema version 10: without it, one entry fewer a create, 7.1 -> 6.1
-- WAL records and 1,095 -> 1,013 bytes a job in batches of 100.
CREATE INDEX IF NOT EXISTS jobs_runnable_idx
    ON jobs (tenant_id, provider, job_name, priority, run_after, created_at)
    WHERE status = 'queued';
-- The running jobs: a tenant's (its running limit), a provider's (its limit: the attempts under
-- way, schema version 22), the fleet's slots, and the leases that may have expired (the reaper
-- reads them all and keeps those past their lease: as many rows as the fleet has slots, never
-- the backlog). No index holds lease_until, so a lease renewal is a HOT update when the row's
-- page has room: until schema version 20 jobs_leased_idx (lease_until) made every renewal write
-- three index entries, and every claim one more: a renewal of 16 jobs 5.56 WAL records a job
-- (docs/benchmarks.md, "WAL per job at schema 22").
CREATE INDEX IF NOT EXISTS jobs_active_tenant_idx ON jobs (tenant_id)
    WHERE status IN ('running', 'cancelling');
-- The janitor's work, oldest first (worker/janitor.py): finished jobs not settled yet (an entry is
-- added by the statement that ends a job, which rewrites the row's index entries anyway), and
-- settled jobs by expiry.
CREATE INDEX IF NOT EXISTS jobs_unsettled_idx ON jobs (finished_at)
    WHERE finished_at IS NOT NULL AND expires_at IS NULL;
CREATE INDEX IF NOT EXISTS jobs_expiry_idx ON jobs (expires_at) WHERE expires_at IS NOT NULL;
-- Failed and dead jobs, newest first (ids are version-7 UUIDs: time-ordered): the operator's
-- dead letters and a failed/dead jobs page (server/admin_api.py) read this, never all jobs; and
-- the same jobs in the order of the overview's groups, which it counts without hashing them
-- (ADMIN_COUNTS: at 40,000 such jobs 7.6 ms a count, against 18.9 hashed). Entries are added
-- only when a job ends failed or dead (and when such a row is rewritten: settled, retried).
CREATE INDEX IF NOT EXISTS jobs_failed_idx ON jobs (id) WHERE status IN ('failed', 'dead');
CREATE INDEX IF NOT EXISTS jobs_failed_groups_idx ON jobs (job_name, tenant_id, status)
    WHERE status IN ('failed', 'dead');

-- A tenant's jobs in the order they were made, with the idempotency keys they were made with:
-- the tenant's job list (newest first, keyset-paginated), its create-rate window, and which job
-- a key made. Written once, by the statement that makes the job (INSERT_JOBS: a keyed item makes
-- a job only if it wins its key here), deleted with the job. Not indexes on jobs: an index on
-- jobs gets a new entry at every update of a job that is not HOT, and every job has two (its
-- claim, its end); the key's entry was each time checked for uniqueness against the old version
-- of the same row, on the random leaf page of a random key. One claim and one success of 64 jobs
-- in a loop: 141 / 155 / 189 µs of the backend's CPU a job with both on jobs, 118 / 127 / 130
-- with neither (schema version 12).
CREATE TABLE IF NOT EXISTS tenant_jobs (
    tenant_id       text NOT NULL,
    created_at      timestamptz NOT NULL,
    job_id          uuid NOT NULL,
    idempotency_key text,
    PRIMARY KEY (tenant_id, created_at, job_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS tenant_jobs_key_idx ON tenant_jobs (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- A chat's newest job (CHAT_LATEST_JOB): POST /api/chat keys a chat's jobs
-- `chat:<the chat id's digest>:<the request's digest>` (jobstream/chats.py), and the reconnect
-- and the stop name the chat alone. Only chats' keys have entries.
CREATE INDEX IF NOT EXISTS tenant_jobs_chat_idx
    ON tenant_jobs (tenant_id, split_part(idempotency_key, ':', 2), created_at, job_id)
    WHERE idempotency_key LIKE 'chat:%';

-- An attempt's row is written once, at its end, by the statement that ends it (SUCCEED_ATTEMPTS,
-- FINISH_ATTEMPT): the running attempt is its job's row (run_token, worker_id, provider), and
-- its start is its claim's, which the worker holds (claimed_job.started_at) and the `status`
-- event that opened its log records (created_at); readers of attempts add it from there
-- (SELECT_ATTEMPTS). Not a column of `jobs`: 8 more bytes in the wide row halved the lease
-- renewals that stay on their page (HOT) in make bench-wal. Until schema version 23 the claim
-- inserted the row and the end rewrote it: an insert, a key entry and a rewrite with two more
-- entries per attempt, where the end's insert writes three. A claim by a worker of version 22
-- (claim_jobs' `attempt_rows`) still inserts it, and the ends finish such a row where they
-- find one.
-- No foreign key to jobs: an attempt is written by the statement that ends its job's attempt,
-- and a job's attempts are deleted with its other rows (delete_jobs, below).
CREATE TABLE IF NOT EXISTS job_attempts (
    job_id         uuid NOT NULL,
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
    -- How cost_usd's price was found (jobstream/prices.py): `catalogue` (the shipped price list),
    -- `operator` (JOBSTREAM_PRICES_FILE's), `default` (a model neither knows, priced at its
    -- provider's default: a guess). The least certain of the attempt's calls'; NULL while it
    -- runs, and when no call was priced.
    price_source   text CHECK (price_source IN ('catalogue', 'operator', 'default')),
    -- For a cancelled attempt: did the provider confirm that it stopped generating?
    cancel_confirmed boolean,
    -- The traceback of an exception a job's own code raised: for operators, never in a public
    -- response (error_class and error_detail are what clients see).
    error_trace    text,
    PRIMARY KEY (job_id, attempt)
);

-- The attempts under way are those of the running jobs (a job is running or cancelling exactly
-- while its current attempt runs), read through jobs_active_tenant_idx. Until schema version 22
-- an index of their own (job_attempts_running_idx, provider) cost every claim an entry.
-- Attempts by when they ended: the janitor's fold of each minute's spend (attempt_minutes).
-- Partial, so a running attempt's row of version 22 has no entry; an attempt's end adds one
-- here, on the right-hand page.
CREATE INDEX IF NOT EXISTS job_attempts_finished_idx ON job_attempts (finished_at)
    WHERE finished_at IS NOT NULL;

-- The hottest table: a row per token flush. No foreign key to jobs: every insert is made by the
-- statement that updates (or inserts) the job's row and allocates the seq there, so the job
-- exists; the per-row check was a sixth of a create and of a flush. Whatever deletes a job
-- deletes its events first.
CREATE TABLE IF NOT EXISTS job_events (
    job_id     uuid NOT NULL,
    seq        bigint NOT NULL,
    attempt    integer NOT NULL,
    type       text NOT NULL CHECK (type IN
                 ('status', 'reset', 'token', 'progress', 'usage', 'attempt_error', 'done')),
    data       jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Events written by one statement for one job share a row (schema version 21): `type` and
    -- `data` are the last of them, at `seq`, and `earlier` the ones before it, oldest first, as
    -- `[type, data]` pairs at the seqs just before (an array of n covers seq - n .. seq - 1).
    -- NULL for a row of one event, which is what every token append writes. An attempt's start
    -- (`reset`, `status`), its success (the last chunk if any, `usage`, `done`) and its other
    -- ends (APPEND_EVENTS: `usage`, `attempt_error`, then `status` or `done`) are a row each
    -- instead of two or three: one heap tuple and one key entry fewer per event, 6 of a no-op
    -- job's WAL records. Never a `progress` (LAST_PROGRESS reads those rows by type); a `token`
    -- only as a success's last chunk: ATTEMPT_TEXT takes a row's earlier events apart, and the
    -- compaction folds the token rows before it and leaves the `done` row whole. Readers see
    -- every event apart: job_log expands the rows, and the streams' reads (EVENTS_AFTER) return
    -- them whole for jobstream/events.py to expand.
    earlier    jsonb,
    PRIMARY KEY (job_id, seq)
);

-- Durable steps of a job's own code (`ctx.step`, worker/steps.py): each finished step once per
-- job, written by the attempt that ran it, fenced by its run token (JOURNAL_STEPS), and read by
-- every later attempt, which replays it instead of running it again: `result` as the step
-- returned it (JSON), `output` what it wrote to the job's log in order (`{"text": ...}` and
-- `{"progress": {...}}` items), and what its model calls used and cost (already in its
-- attempt's row as well: an accepted result made of replayed steps is charged for them once).
-- No foreign key: deleted with the job's other rows (delete_jobs).
CREATE TABLE IF NOT EXISTS job_steps (
    job_id        uuid NOT NULL,
    step          text NOT NULL,
    attempt       integer NOT NULL,
    run_token     uuid NOT NULL,
    result        jsonb,
    output        jsonb NOT NULL DEFAULT '[]',
    input_tokens  integer NOT NULL DEFAULT 0,
    output_tokens integer NOT NULL DEFAULT 0,
    cost_usd      numeric(18, 8) NOT NULL DEFAULT 0,
    cost_known    boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- How the step's cost was priced (job_attempts.price_source): an attempt lost to a crash
    -- records the least certain of its steps' (FINISH_ATTEMPT). NULL for a step journaled
    -- before schema version 23, or one that made no call.
    price_source  text,
    PRIMARY KEY (job_id, step)
);

-- Provider-wide coordination across every worker: claims for a provider with a concurrency
-- limit lock its row (claim_jobs below), and a 429 pauses it.
CREATE TABLE IF NOT EXISTS provider_state (
    provider     text PRIMARY KEY,
    paused_until timestamptz,
    -- When the latest pause was set: the moment after which no worker claims for the provider.
    paused_at    timestamptz
);

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
-- Deleting a job deletes its webhook rows: found by job, not by a scan of the outbox.
CREATE INDEX IF NOT EXISTS webhook_deliveries_job_idx ON webhook_deliveries (job_id);

-- What retention deleted, for a while (JOBSTREAM_TOMBSTONE_S): its id answers 410 Gone, not 404.
CREATE TABLE IF NOT EXISTS job_tombstones (
    id         uuid PRIMARY KEY,
    tenant_id  text NOT NULL,
    deleted_at timestamptz NOT NULL,
    -- The key the job was made with, and its request's hash: while the tombstone is kept, the
    -- key answers 410 (same request) or 409 (another), and makes no second job.
    idempotency_key text,
    request_hash    text
);
CREATE INDEX IF NOT EXISTS job_tombstones_deleted_idx ON job_tombstones (deleted_at);
CREATE INDEX IF NOT EXISTS job_tombstones_key_idx ON job_tombstones (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The worker processes: each writes its row at start, refreshes heartbeat_at with its lease
-- renewals (an idle worker alone), and sets stopped_at on a clean exit. The live ones' slots
-- are the fleet's, which a tenant without a running limit of its own gets a fair share of
-- (claim_jobs).
CREATE TABLE IF NOT EXISTS workers (
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

-- The metrics' counters (server/metrics.py), kept by the statements that change what they count,
-- in the same transactions, so a scrape reads a few rows instead of counting history, and
-- deleting history takes nothing off them. One row per writing backend (pg_backend_pid()) and
-- provider: a backend runs one transaction at a time, so no writer ever waits on another's row
-- (one shared row would be a lock every create, claim and completion queues on; shards picked by
-- job id can be locked by a claim before a tenant row that a create holds while it waits for
-- the same shard: a deadlock). The janitor folds the rows of backends that are gone into
-- backend 0, so the table holds a row per live backend and provider. Each statement adds one
-- upsert in one CTE; the hot per-token append adds nothing (events are counted when a job ends,
-- and a scrape adds the live jobs' last_seq).
-- The `*_counts` are cumulative histogram counts, one per bound of queries.DURATION_BUCKETS;
-- their +Inf counts are attempts_started - retries (first attempts) and the sum of the outcomes.
CREATE TABLE IF NOT EXISTS metric_totals (
    backend           integer NOT NULL,
    provider          text NOT NULL,
    jobs_created      bigint NOT NULL DEFAULT 0,
    jobs_accepted     bigint NOT NULL DEFAULT 0,
    charged_usd       numeric NOT NULL DEFAULT 0,
    attempts_started  bigint NOT NULL DEFAULT 0,
    retries           bigint NOT NULL DEFAULT 0,
    -- Attempts by outcome, counted when they end.
    succeeded         bigint NOT NULL DEFAULT 0,
    failed            bigint NOT NULL DEFAULT 0,
    unknown           bigint NOT NULL DEFAULT 0,
    cancelled         bigint NOT NULL DEFAULT 0,
    lost              bigint NOT NULL DEFAULT 0,
    interrupted       bigint NOT NULL DEFAULT 0,
    cost_usd          numeric NOT NULL DEFAULT 0,
    cost_unknown      bigint NOT NULL DEFAULT 0,
    -- The last_seq of every job when it ended: the events appended to finished logs.
    events_ended      bigint NOT NULL DEFAULT 0,
    -- Created to first attempt; each attempt's run.
    queue_wait_counts bigint[],
    queue_wait_s      float8 NOT NULL DEFAULT 0,
    run_counts        bigint[],
    run_s             float8 NOT NULL DEFAULT 0,
    -- The janitor's work (provider '').
    jobs_compacted    bigint NOT NULL DEFAULT 0,
    events_compacted  bigint NOT NULL DEFAULT 0,
    jobs_deleted      bigint NOT NULL DEFAULT 0,
    rows_deleted      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (backend, provider)
)
-- Every counting statement rewrites its connection's row: with free room on the row's page the
-- new version stays there (a HOT update, no index entry) and the old ones are pruned in place.
-- Packed full, each update moved to a new page and left an index entry behind, and every
-- create's upsert walked the dead ones: 0.6 ms a create (bench.jobstream_side.enqueue_direct,
-- 1,000 creates: 2.2 s at fillfactor 100, 1.5 s at 10).
WITH (fillfactor = 10);

-- The operator's per-minute series (jobstream/series.py, docs/admin.md): metric_totals' counters
-- as they stood at the end of each minute, written by the janitor (the row of the current minute
-- is rewritten by each of its rounds). A minute's throughput and percentiles are the difference
-- of two rows, so the overview reads at most 61 rows, never history. Kept
-- JOBSTREAM_ADMIN_SERIES_KEEP_S.
CREATE TABLE IF NOT EXISTS metric_minutes (
    minute            timestamptz PRIMARY KEY,
    jobs_created      bigint NOT NULL,
    jobs_accepted     bigint NOT NULL,
    -- attempts_started - retries: what queue_wait_counts' +Inf bucket counts.
    first_attempts    bigint NOT NULL,
    queue_wait_counts bigint[],
    -- Attempts that ended, whatever their outcome: run_counts' +Inf bucket.
    attempts_ended    bigint NOT NULL,
    run_counts        bigint[]
);

-- What the attempts that ended in a minute cost, by tenant, job name and model, and how many
-- jobs they ended failed or dead: folded by the janitor once a minute from the attempts that
-- ended (job_attempts_finished_idx), the last two minutes folded again (a commit a little late
-- is counted). Kept JOBSTREAM_ADMIN_SERIES_KEEP_S.
CREATE TABLE IF NOT EXISTS attempt_minutes (
    minute      timestamptz NOT NULL,
    tenant_id   text NOT NULL,
    job_name    text NOT NULL,
    model       text NOT NULL,
    cost_usd    numeric(18, 8) NOT NULL,
    jobs_failed bigint NOT NULL,
    PRIMARY KEY (minute, tenant_id, job_name, model)
);

-- A row of claim_jobs' answer (below). A type is data, not a routine: migrations create and
-- change it as they do tables.
CREATE TYPE claimed_job AS (
    id                 uuid,
    tenant_id          text,
    attempts           integer,
    uncounted_attempts integer,
    max_attempts       integer,
    run_token          uuid,
    provider           text,
    payload            jsonb,
    last_seq           bigint,
    job_name           text,
    traceparent        text,
    -- When the attempt began (schema version 23): the start its row records at its end.
    started_at         timestamptz
);

INSERT INTO schema_version (version) VALUES (23) ON CONFLICT (version) DO NOTHING;

-- routines: every function, aggregate and view. A fresh database runs this file whole; after
-- migrations, jobstream/migrations.py runs again what follows this line (every statement is
-- CREATE OR REPLACE), so a routine lives here alone and no migration copies it. Changing one
-- bumps the schema version (its migration may hold only a comment) so that databases get it;
-- a change CREATE OR REPLACE cannot make (a view's columns, a function's arguments or result),
-- or a change of a column a view reads, needs that migration to DROP the routine first.

-- What a person (and a test) asks of a tenant's money.
CREATE OR REPLACE VIEW tenant_balances AS
SELECT t.id AS tenant_id, t.budget_usd,
       coalesce(sum(l.reserved_usd), 0)::numeric(18, 8) AS reserved_usd,
       coalesce(sum(l.spent_usd), 0)::numeric(18, 8) AS spent_usd
  FROM tenants t LEFT JOIN tenant_ledger l ON l.tenant_id = t.id
 GROUP BY t.id, t.budget_usd;

-- The queues: the distinct (tenant, provider, job name, priority) of queued jobs, found by skipping
-- through jobs_runnable_idx one queue at a time (a loose index scan: one descent per queue,
-- never a read of the jobs inside), so its cost grows with the number of queues, not of jobs.
-- Read by every claim (claim_jobs below, its steps 1 and 2).
CREATE OR REPLACE VIEW job_queues AS
WITH RECURSIVE queues AS (
    (SELECT tenant_id, provider, job_name, priority
       FROM jobs
      WHERE status = 'queued'
      ORDER BY tenant_id, provider, job_name, priority
      LIMIT 1)
    UNION ALL
    SELECT next.tenant_id, next.provider, next.job_name, next.priority
      FROM queues q
     CROSS JOIN LATERAL (
           SELECT tenant_id, provider, job_name, priority
             FROM jobs
            WHERE status = 'queued'
              AND (tenant_id, provider, job_name, priority)
                  > (q.tenant_id, q.provider, q.job_name, q.priority)
            ORDER BY tenant_id, provider, job_name, priority
            LIMIT 1) next
)
SELECT tenant_id, provider, job_name, priority FROM queues;

-- A job's log as stored (EVENTS_AFTER, EVENTS_AFTER_MANY): its rows, each of one event or of
-- several (job_events.earlier), in seq order. A log opens with the job's `queued` status at seq
-- 1, and for a job INSERT_JOBS made that event has no row: it is the same for every job and is
-- read from the job. Its row was a heap tuple and a key entry beside the job's for every create:
-- 5-13 % of the backend's CPU for a batch of 1,000 (3-9 ms of 54-75). It is given while the
-- stored log starts at seq 2 or is empty: a log that stores its seq 1 (made before schema
-- version 7, or an operator's retry, whose `queued` names the dead job) is read as stored, and
-- one whose head was deleted still starts past the gap, so its readers are told to resync.
-- With the seq bounded past 1 (every read but the first of a stream), PostgreSQL drops the
-- second branch at plan time.
CREATE OR REPLACE VIEW job_log_rows AS
SELECT job_id, seq, attempt, type, data, created_at, earlier
  FROM job_events
 UNION ALL
SELECT j.id, 1::bigint, 0, 'status'::text, '{"status": "queued"}'::jsonb, j.created_at,
       NULL::jsonb
  FROM jobs j
 WHERE coalesce((SELECT e.seq - coalesce(jsonb_array_length(e.earlier), 0)
                   FROM job_events e
                  WHERE e.job_id = j.id
                  ORDER BY e.seq
                  LIMIT 1), 2) = 2;

-- A job's log as readers see it, an event a row: job_log_rows with each row's `earlier` events
-- at their own seqs (the operator's timeline, and whoever reads a whole log in SQL).
CREATE OR REPLACE VIEW job_log AS
SELECT r.job_id, x.seq, r.attempt, x.type, x.data, r.created_at
  FROM job_log_rows r
 CROSS JOIN LATERAL (
       SELECT r.seq - jsonb_array_length(r.earlier) + e.k - 1 AS seq, e.item->>0 AS type,
              e.item->1 AS data
         FROM jsonb_array_elements(r.earlier) WITH ORDINALITY AS e (item, k)
        UNION ALL
       SELECT r.seq, r.type, r.data) x;

-- When attempt `attempt` of job `job` began: the time of the event row that opened its log
-- (claim_jobs stamps it with the attempt's start). For readers that do not have the start the
-- claim returned: the reaper, and the lists of a job's attempts, whose running one has no
-- `job_attempts` row (schema version 23, job_attempts says why). One descent of the log's key,
-- then its rows up to the attempt's first.
CREATE OR REPLACE FUNCTION attempt_started_at(job uuid, attempt integer) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT e.created_at FROM job_events e
     WHERE e.job_id = job AND e.attempt = attempt_started_at.attempt
     ORDER BY e.seq
     LIMIT 1
$$;

-- Histograms: arrays of cumulative counts, one per bound of DURATION_BUCKETS (jobstream/types.py,
-- whose test reads these two functions). Both are one plain expression, so PostgreSQL inlines
-- them into the statements that call them: no function call per row or per statement.

-- Element-wise sum of two histograms' counts; NULL stands for none. The upserts of metric_totals
-- merge with it, and sum_counts below folds many rows.
CREATE OR REPLACE FUNCTION add_counts(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a
                ELSE ARRAY[a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5],
                           a[6] + b[6], a[7] + b[7], a[8] + b[8], a[9] + b[9], a[10] + b[10],
                           a[11] + b[11], a[12] + b[12], a[13] + b[13]]
           END
$$;

-- The histogram of some durations in seconds, given sorted ascending: width_bucket(bound, sorted)
-- is how many are at or under the bound. Called as duration_counts(array_agg(x ORDER BY x)),
-- which reads the rows once. Only the one-row FINISH_ATTEMPT calls it: on a 64-row batch the sort
-- costs about 30 us more than 13 `count(*) FILTER (WHERE x <= bound)` (measured with
-- pg_stat_statements, PostgreSQL 18), so claim_jobs and SUCCEED_ATTEMPTS keep those.
CREATE OR REPLACE FUNCTION duration_counts(sorted float8[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[width_bucket(0.05, sorted), width_bucket(0.1, sorted),
                 width_bucket(0.25, sorted), width_bucket(0.5, sorted), width_bucket(1, sorted),
                 width_bucket(2.5, sorted), width_bucket(5, sorted), width_bucket(10, sorted),
                 width_bucket(30, sorted), width_bucket(60, sorted), width_bucket(120, sorted),
                 width_bucket(300, sorted), width_bucket(600, sorted)]::bigint[]
$$;

-- The element-wise sum of many histograms' counts (the scrape, the janitor's fold).
CREATE OR REPLACE AGGREGATE sum_counts(bigint[]) (SFUNC = add_counts, STYPE = bigint[]);

-- Every row of these jobs, which the caller has locked (DELETE_EXPIRED_JOBS, DELETE_FINISHED_JOB):
-- events, attempts, webhook rows (a pending delivery too), the tenant_jobs row and the job. A
-- row per job deleted, each with the number of rows deleted in all, and what its tombstone and
-- the tenant's stored bytes need (DELETE_EXPIRED_JOBS).
CREATE OR REPLACE FUNCTION delete_jobs(doomed uuid[])
RETURNS TABLE (id uuid, tenant_id text, rows_deleted bigint, idempotency_key text,
               request_hash text, input_bytes integer) LANGUAGE sql AS $$
    WITH events AS (
        DELETE FROM job_events e WHERE e.job_id = ANY(doomed) RETURNING 1
    ), attempts AS (
        DELETE FROM job_attempts a WHERE a.job_id = ANY(doomed) RETURNING 1
    ), steps AS (
        DELETE FROM job_steps s WHERE s.job_id = ANY(doomed) RETURNING 1
    ), hooks AS (
        DELETE FROM webhook_deliveries w WHERE w.job_id = ANY(doomed) RETURNING 1
    ), gone AS (
        DELETE FROM jobs j WHERE j.id = ANY(doomed)
        RETURNING j.id, j.tenant_id, j.created_at, j.idempotency_key, j.request_hash,
                  j.input_bytes
    ), unlisted AS (
        DELETE FROM tenant_jobs t USING gone g
         WHERE t.tenant_id = g.tenant_id AND t.created_at = g.created_at AND t.job_id = g.id
        RETURNING 1
    )
    SELECT g.id, g.tenant_id,
           (SELECT count(*) FROM gone) + (SELECT count(*) FROM events)
           + (SELECT count(*) FROM attempts) + (SELECT count(*) FROM steps)
           + (SELECT count(*) FROM hooks)
           + (SELECT count(*) FROM unlisted),
           g.idempotency_key, g.request_hash, g.input_bytes
      FROM gone g
$$;

-- The body of a job's terminal webhook, built from its final row; its timestamp is the job's end,
-- so a retried delivery sends the same bytes. Used by every statement that ends a job.
CREATE OR REPLACE FUNCTION job_webhook_payload(
    id uuid, status text, attempts integer, finished_at timestamptz, result jsonb, error jsonb
) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'type', 'job.' || status,
        'timestamp', to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', jsonb_build_object('id', id, 'status', status, 'attempts', attempts)
                || CASE WHEN status = 'succeeded' THEN jsonb_build_object('result', result)
                        ELSE jsonb_build_object('error', error) END)
$$;

-- The claim (jobstream/claims.py, claim_batch): up to max_jobs runnable jobs for a worker's free
-- slots, in one call, so one round trip and one implicit transaction. Until schema version 11
-- the claim was four statements in a transaction of six round trips; the worker's event loop,
-- busy with the attempts, sent each next statement late, and the transaction sat idle between
-- them holding its tenants' rows (a drain of 20,000 no-op jobs: 4,385 -> 4,887 jobs/s as one
-- call, medians of three). Its steps, each a statement with a snapshot of its own (READ
-- COMMITTED; a plpgsql statement takes a new one), so each sees what committed before it began:
-- 1. For a worker that runs providers with a concurrency limit (limited/limits, sorted by name):
--    lock the provider_state row of each limited provider that has a runnable job.
--    - The row lock serialises claims per limited provider across every worker, until commit:
--      no other claim for the provider can commit between our count of its running attempts
--      and our own claim, so the limit holds exactly. (Each worker checks the shared count
--      against its own setting: workers configured differently cap the provider at the largest
--      of their limits.)
--    - A statement's snapshot is taken before it waits for a lock, so the count cannot live in
--      this statement: it is in step 2's, taken after this lock was granted.
--    - Only providers with a runnable job are locked, so idle polls and claims for other
--      providers do not queue behind each other. The probe walks the queues as step 2 does
--      (job_queues, then one descent of jobs_runnable_idx per limited provider's queue for its
--      head): 0.2-0.5 ms with 60 queues and 100,000 jobs queued. An index on (provider,
--      run_after) answered in one descent until schema version 10, for an entry in every
--      create. PostgreSQL 18 would skip through jobs_runnable_idx in 0.035 ms (ORDER BY its
--      columns); without a skip scan that reads the table, 35-40 ms.
--    - An upsert, so the row exists without a set-up step; DO UPDATE (not DO NOTHING) because
--      only it locks a row that already exists (the update leaves the row as it was). Rows are
--      locked in name order, so two claims never wait for each other in a cycle.
-- 2. The claim, for the unlimited providers ($1) and the limited ones locked in step 1. Its cost
--    does not grow with the backlog: every read is an index probe or a range of at most
--    max_jobs index entries.
--    - `queues`: the distinct (tenant, provider, job name, priority) of queued jobs (job_queues),
--      of the names this worker runs ($9): its cost grows with the number of queues, not of jobs.
--    - `with_room`: providers this worker runs that may start more attempts. A limited
--      provider's running attempts are counted here, after step 1's lock: its running jobs,
--      each running from its claim until its attempt's outcome is written, which is after its
--      HTTP request has closed.
--    - `tenant_room`: a tenant at its running limit is skipped, and so are the tenants of
--      `skipped` (found full by an earlier try). The count comes from this statement's
--      snapshot: two claims at once can both see room, so step 3 counts again.
--    - `fair`: the running limit of a tenant whose max_running is NULL, a fair share of the
--      fleet's slots: greatest(1, least(floor(fleet * max_share), ceil(fleet / active))).
--      `fleet` is the slots of the live workers (`workers` rows not stopped, with a heartbeat
--      younger than lease_s: each worker refreshes its own every third of its lease), never
--      less than max_jobs (this worker's free slots: a true lower bound of the fleet even
--      when its row is missing). `active` is the tenants with jobs queued under these names
--      (`queues`) or running (`running_tenants`, one descent of jobs_active_tenant_idx per
--      tenant). fleet / active splits the slots evenly among the tenants that want them, and
--      max_share (JOBSTREAM_TENANT_MAX_SHARE) keeps one from taking every slot while it is
--      alone, so that another tenant's next job finds one free at once. Regression: a fixed
--      default of 16, above a worker's slots, let one tenant's long jobs fill all four slots
--      of a worker while another tenant's one-token job waited 12 s. With a single
--      tenants row (`make run`, or keys off: every request is `default`'s) there is no limit
--      at all: no slot is kept for a tenant that cannot exist (a limit of the whole fleet
--      would only refuse jobs whenever the fleet is undercounted). Computed once per call,
--      and only when a tenant without a limit of its own is in `queues` (an InitPlan, run on
--      first use): one read of `tenants` (two rows at most) and of `workers` (a row per
--      worker), and the descents of `running_tenants` (`queues` is the statement's own, read
--      once for all its uses). 21 tenants, 10 of them running jobs: 23 pages more, of a
--      claim's 420; no scan of jobs. The claimed rows carry it out as
--      `fair_limit` for step 3. A tenant's explicit max_running is exact (step 3); a fair
--      limit is as exact as the claims' views of the fleet agree: two claims at once may
--      compute it from different snapshots, each then holds to its own.
--    - `open`: queues with a runnable head (`run_after <= now`: backoff and delayed jobs wait),
--      of a provider with room that no 429 has paused. `tenant_turn` ranks a tenant's queues by
--      priority, so that one tenant's many queues do not crowd out another's one.
--    - Tenants take turns: each tenant's best queue before anyone's second, then the tenant
--      with fewer running jobs, then the one served longest ago (`last_claimed_at`), then the
--      oldest. At most max_jobs + 4 queues take part: the 4 spare ones fill the batch when the
--      first ones' heads are all locked by other claims in flight (SKIP LOCKED passes over
--      them). Each offers what the batch could hold if every other queue gave one job (at least
--      one): the batch fills while rows locked and not taken stay few.
--    - `candidates`: from each chosen queue, its oldest runnable jobs, FOR UPDATE SKIP LOCKED
--      so that any number of workers claim at once without waiting for each other.
--    - `chosen`: interleave tenants (a tenant's first job, then every tenant's second...), cap
--      each tenant at its room and each provider at its room, and keep max_jobs.
--    - `claimed`: a fresh run_token (the fence for every later write) and a lease for each (the
--      attempt's `job_attempts` row is written at its end; `attempt_rows`); the `reset` and
--      `status` events that open the attempt's log, stamped with the attempt's start, are
--      written by the same statement, which allocates their seqs (last_seq + 2) under the row
--      lock the UPDATE holds. Their followers are told after the commit (NOTIFY_EVENTS in
--      jobstream/sql/events.sql says why).
--    - `counted`: the metrics' counters (jobstream/sql/metrics.sql): the attempts it started,
--      the retries among them, and the first attempts' waits since their job's creation.
-- 3. A tenant's running limit (its own, or step 2's fair one), exactly: lock the rows of the
--    tenants claimed for, in id order (two claims never wait on each other in a cycle), then
--    count in the next statement, whose snapshot follows the locks and so sees every claim
--    committed before it. That statement also records the tenants' turn (last_claimed_at) on
--    rows already held. A tenant over its limit undoes steps 2 and 3 (they run in a savepoint)
--    and the call returns, instead of jobs, a row with no id for each such tenant:
--    claims.claim_batch tries again. Failing the call instead (an error of our own, which
--    undoes the claim just as well) would have PostgreSQL log an ERROR, with the statement, at
--    every lost race for a tenant's last slot.
--    - FOR NO KEY UPDATE, never FOR UPDATE, on tenants: a foreign key to a tenant (the ledger's)
--      takes FOR KEY SHARE, which FOR UPDATE conflicts with. NO KEY UPDATE still serialises the
--      lockers.
--    - A lock and nothing else, then the turn in its own statement. Regression: the lock and the
--      turn were one `UPDATE tenants t ... FROM (SELECT ... FOR NO KEY UPDATE) l`, which
--      deadlocked with itself: when a claim committed a new version of the row after that
--      statement's snapshot (and a ledger booking's foreign key held FOR KEY SHARE on it), the
--      subquery locked the new version while the UPDATE, reading the old one, waited for the
--      old version's tuple lock, held by a second claim that waited for the first to commit
--      (tests/integration/test_claims.py).
-- The worker's NOTIFY for the attempts' opened logs follows in a statement of its own, after
-- this call's commit.
CREATE OR REPLACE FUNCTION claim_jobs(
    unlimited text[], worker text, lease_s float8, at_time timestamptz, limited text[],
    limits integer[], skipped text[], max_jobs integer, names text[], max_share float8,
    -- Insert each attempt's row now, as until schema version 23: the default, for a worker of
    -- version 22 during a rolling deploy, whose end statements update that row. Workers since
    -- pass false: the row is written at the attempt's end.
    attempt_rows boolean DEFAULT true
) RETURNS SETOF claimed_job LANGUAGE plpgsql AS $$
DECLARE
    locked_providers text[] := '{}';
    locked_limits integer[] := '{}';
    taken claimed_job[];
    taken_tenants text[];
    over_limit text[];
    -- The running limit of a tenant without one of its own, as step 2 computed it (`fair`), for
    -- step 3's recount: NULL when no such tenant was claimed for, or when there is no limit.
    fair_limit_used integer;
BEGIN
    IF cardinality($5) > 0 THEN
        WITH locked AS (
            WITH runnable AS (
                SELECT DISTINCT q.provider
                  FROM job_queues q
                 CROSS JOIN LATERAL (
                       SELECT FROM jobs j
                        WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
                          AND j.provider = q.provider AND j.job_name = q.job_name
                          AND j.priority = q.priority
                          AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
                        ORDER BY j.run_after, j.created_at
                        LIMIT 1) head
                 WHERE q.provider = ANY($5::text[]) AND q.job_name = ANY($9::text[])
            )
            INSERT INTO provider_state AS p (provider)
            SELECT provider FROM runnable ORDER BY provider
            ON CONFLICT (provider) DO UPDATE SET paused_until = p.paused_until
            RETURNING provider
        )
        SELECT coalesce(array_agg(l.provider ORDER BY l.provider), '{}'),
               coalesce(array_agg(l.max_running ORDER BY l.provider), '{}')
          INTO locked_providers, locked_limits
          FROM unnest($5::text[], $6::int[]) AS l (provider, max_running)
         WHERE l.provider IN (SELECT provider FROM locked);
    END IF;

    -- Steps 2 and 3 are a savepoint (a block with an EXCEPTION clause): a claim that
    -- finds a tenant over its limit undoes them there, and no ERROR reaches the log.
    BEGIN
        WITH RECURSIVE queues AS (
            -- Only the names this worker runs: a job of another name stays queued for a
            -- worker that has it (a rolling deploy), and its queue costs this claim nothing more.
            SELECT tenant_id, provider, job_name, priority FROM job_queues
             WHERE job_name = ANY($9::text[])
        ), running_tenants AS (
            -- The tenants with running jobs, one descent of jobs_active_tenant_idx each (a loose
            -- index scan, as job_queues), so never a read of their jobs. Only `fair` reads it.
            (SELECT tenant_id FROM jobs
              WHERE status IN ('running', 'cancelling')
              ORDER BY tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT j.tenant_id FROM jobs j
                     WHERE j.status IN ('running', 'cancelling') AND j.tenant_id > r.tenant_id
                     ORDER BY j.tenant_id LIMIT 1)
              FROM running_tenants r
             WHERE r.tenant_id IS NOT NULL
        ), fair AS MATERIALIZED (
            -- The running limit of a tenant without one of its own (the comment above says
            -- why this formula). Read lazily: only a tenant with a NULL max_running asks.
            -- MATERIALIZED: the planner copies tenant_room's expression wherever room is read,
            -- and each copy would compute it again; materialized, the first computes it and
            -- the others read its one row.
            SELECT CASE WHEN (SELECT count(*) FROM (SELECT FROM tenants LIMIT 2) t) < 2
                        THEN NULL  -- a lone tenant: nobody to keep a slot for, no limit
                        ELSE (SELECT greatest(1, least(floor(f.slots * $10),
                                                       ceil(f.slots / a.n)))::int
                                FROM (SELECT greatest($8, sum(w.slots))::float8 AS slots
                                        FROM workers w
                                       WHERE w.stopped_at IS NULL
                                         AND w.heartbeat_at
                                             > coalesce($4::timestamptz, statement_timestamp())
                                               - make_interval(secs => $3)) f,
                                     (SELECT greatest(1, count(*))::float8 AS n
                                        FROM (SELECT tenant_id FROM queues
                                              UNION
                                              SELECT tenant_id FROM running_tenants
                                               WHERE tenant_id IS NOT NULL) active) a)
                   END AS running_limit
        ), busy AS (
            -- The attempts under way: the running jobs' (jobs_active_tenant_idx).
            SELECT provider, count(*) AS n
              FROM jobs
             WHERE status IN ('running', 'cancelling') AND provider = ANY(locked_providers)
             GROUP BY provider
        ), with_room AS (
            SELECT u.provider, $8::int AS room
              FROM unnest($1::text[]) AS u (provider)
            UNION ALL
            SELECT l.provider, l.max_running - coalesce(b.n, 0)::int
              FROM unnest(locked_providers, locked_limits) AS l (provider, max_running)
              LEFT JOIN busy b ON b.provider = l.provider
        ), tenant_room AS (
            -- room: the limit (its own, or the fair one) less its running jobs; no limit at
            -- all (a lone tenant) leaves the batch as the only cap.
            SELECT t.id AS tenant_id,
                   coalesce(coalesce(t.max_running, f.running_limit) - r.n, $8) AS room,
                   r.n AS running, t.last_claimed_at, f.running_limit AS fair_limit
              FROM tenants t
             CROSS JOIN LATERAL (
                   SELECT count(*)::int AS n
                     FROM jobs
                    WHERE tenant_id = t.id AND status IN ('running', 'cancelling')) r
             CROSS JOIN LATERAL (
                   SELECT CASE WHEN t.max_running IS NULL
                               THEN (SELECT running_limit FROM fair) END AS running_limit) f
             WHERE t.id IN (SELECT tenant_id FROM queues)
               AND t.id <> ALL($7::text[])
        ), open AS (
            SELECT q.tenant_id, q.provider, q.job_name, q.priority, tr.room, tr.running, tr.last_claimed_at,
                   tr.fair_limit, w.room AS provider_room, head.run_after AS head_after,
                   row_number() OVER (PARTITION BY q.tenant_id
                                      ORDER BY q.priority DESC, head.run_after) AS tenant_turn
              FROM queues q
              JOIN tenant_room tr ON tr.tenant_id = q.tenant_id
              JOIN with_room w ON w.provider = q.provider
              LEFT JOIN provider_state p ON p.provider = q.provider
             CROSS JOIN LATERAL (
                   SELECT j.run_after
                     FROM jobs j
                    WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
                      AND j.provider = q.provider AND j.job_name = q.job_name
                      AND j.priority = q.priority
                      AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
                    ORDER BY j.run_after, j.created_at
                    LIMIT 1) head
             WHERE tr.room > 0 AND w.room > 0
               AND (p.paused_until IS NULL
                    OR p.paused_until <= coalesce($4::timestamptz, statement_timestamp()))
        ), chosen_queues AS (
            SELECT o.*, count(*) OVER () AS n_queues
              FROM (SELECT *
                      FROM open
                     ORDER BY tenant_turn, running, last_claimed_at NULLS FIRST, head_after
                     LIMIT $8 + 4) o
        ), candidates AS (
            SELECT c.id, c.previous_error, c.run_after, q.tenant_id, q.provider, q.priority, q.room,
                   q.running, q.last_claimed_at, q.provider_room, q.fair_limit
              FROM chosen_queues q
             CROSS JOIN LATERAL (
                   SELECT j.id, j.error AS previous_error, j.run_after, j.created_at
                     FROM jobs j
                    WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
                      AND j.provider = q.provider AND j.job_name = q.job_name
                      AND j.priority = q.priority
                      AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
                    ORDER BY j.run_after, j.created_at
                    LIMIT least(q.room, q.provider_room, greatest(1, $8 - q.n_queues + 1))
                      FOR UPDATE SKIP LOCKED) c
        ), ranked AS (
            SELECT c.*, row_number() OVER (PARTITION BY c.tenant_id
                                           ORDER BY c.priority DESC, c.run_after) AS turn
              FROM candidates c
        ), chosen AS (
            SELECT r.id, r.previous_error, r.fair_limit
              FROM (SELECT r.*,
                           row_number() OVER (PARTITION BY r.provider
                                              ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST,
                                                       r.priority DESC, r.run_after) AS provider_turn
                      FROM ranked r
                     WHERE r.turn <= r.room) r
             WHERE r.provider_turn <= r.provider_room
             ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST, r.priority DESC, r.run_after
             LIMIT $8
        ), claimed AS (
            UPDATE jobs j
               SET status = 'running', attempts = j.attempts + 1, run_token = gen_random_uuid(),
                   worker_id = $2,
                   lease_until = coalesce($4::timestamptz, statement_timestamp())
                                 + make_interval(secs => $3),
                   started_at = coalesce(j.started_at, $4::timestamptz, statement_timestamp()),
                   updated_at = coalesce($4::timestamptz, statement_timestamp()),
                   -- Cleared here; the new attempt's `reset` event still names it as the reason.
                   error = NULL,
                   last_seq = j.last_seq + 2
              FROM chosen c
             WHERE j.id = c.id
            RETURNING j.id, j.tenant_id, j.attempts, j.uncounted_attempts, j.max_attempts, j.run_token,
                      j.provider, j.payload, j.last_seq, j.job_name, j.traceparent, j.worker_id,
                      coalesce($4::timestamptz, statement_timestamp()) AS attempt_started_at,
                      c.previous_error,
                      extract(epoch FROM j.started_at - j.created_at)::float8 AS waited_s,
                      c.fair_limit
        ), attempt AS (
            -- Only for a worker of version 22 (`attempt_rows`, above).
            INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, provider, model)
            SELECT id, attempts, run_token, worker_id, coalesce($4::timestamptz, statement_timestamp()),
                   provider, payload->>'model'
              FROM claimed
             WHERE attempt_rows
        ), opened AS (
            -- The attempt's `reset` and `status` events, one row (job_events.earlier), made at
            -- the attempt's start: the reaper's record of a lost attempt reads it there.
            INSERT INTO job_events (job_id, seq, attempt, type, data, earlier, created_at)
            SELECT id, last_seq, attempts, 'status', '{"status": "running"}'::jsonb,
                   jsonb_build_array(jsonb_build_array(
                       'reset',
                       jsonb_build_object(
                           'attempt', attempts,
                           'reason', CASE WHEN attempts = 1 THEN 'first attempt'
                                          ELSE 'retry after '
                                               || coalesce(previous_error->>'class',
                                                           'an interrupted attempt')
                                     END))),
                   attempt_started_at
              FROM claimed
        ), counted AS (
            INSERT INTO metric_totals AS m (backend, provider, attempts_started, retries,
                                            queue_wait_counts, queue_wait_s)
            SELECT pg_backend_pid(), provider, count(*), count(*) FILTER (WHERE attempts > 1),
                   -- queue_wait_counts: how many at or under each bound of DURATION_BUCKETS
                   -- (jobstream/types.py), written out: duration_counts (schema.sql) would sort the
                   -- batch, which costs more.
                   ARRAY[count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.05),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.1),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.25),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.5),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 1),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 2.5),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 5),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 10),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 30),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 60),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 120),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 300),
                         count(*) FILTER (WHERE attempts = 1 AND waited_s <= 600)],
                   coalesce(sum(waited_s) FILTER (WHERE attempts = 1), 0)
              FROM claimed
             GROUP BY provider
            ON CONFLICT (backend, provider) DO UPDATE
               SET attempts_started = m.attempts_started + EXCLUDED.attempts_started,
                   retries = m.retries + EXCLUDED.retries,
                   queue_wait_counts = add_counts(m.queue_wait_counts, EXCLUDED.queue_wait_counts),
                   queue_wait_s = m.queue_wait_s + EXCLUDED.queue_wait_s
        )
        SELECT array_agg((id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token,
                          provider, payload, last_seq, job_name, traceparent,
                          attempt_started_at)::claimed_job),
               max(fair_limit)
          INTO taken, fair_limit_used
          FROM claimed;
        IF taken IS NULL THEN
            RETURN;
        END IF;

        taken_tenants := ARRAY(SELECT DISTINCT c.tenant_id FROM unnest(taken) AS c ORDER BY 1);
        PERFORM FROM tenants WHERE id = ANY(taken_tenants) ORDER BY id FOR NO KEY UPDATE;
        WITH turn AS (
            UPDATE tenants
               SET last_claimed_at = coalesce($4::timestamptz, statement_timestamp())
             WHERE id = ANY(taken_tenants)
        )
        SELECT array_agg(t.id)
          INTO over_limit
          FROM tenants t
         WHERE t.id = ANY(taken_tenants)
           AND coalesce(t.max_running, fair_limit_used)
               < (SELECT count(*) FROM jobs j
                   WHERE j.tenant_id = t.id AND j.status IN ('running', 'cancelling'));
        IF over_limit IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'JS409';
        END IF;
    EXCEPTION WHEN SQLSTATE 'JS409' THEN
        -- Undone (local variables outlive it): a row with no id for each tenant over its
        -- limit tells the caller to try again.
        RETURN QUERY SELECT NULL::uuid, t, NULL::integer, NULL::integer, NULL::integer,
                            NULL::uuid, NULL::text, NULL::jsonb, NULL::bigint, NULL::text,
                            NULL::text, NULL::timestamptz
                       FROM unnest(over_limit) AS t;
        RETURN;
    END;
    RETURN QUERY SELECT * FROM unnest(taken);
END
$$;
