-- Version 3 to 4: retention (jobs are deleted some time after they end), compaction of finished
-- logs, and metric counters kept by the writers instead of counted from history at each scrape.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).
-- The new columns are metadata only. The two new indexes on jobs are built here, under a lock
-- that holds back writes to jobs while they build (seconds per million jobs): on a large
-- database, build them first by hand with CREATE INDEX CONCURRENTLY (the same definitions),
-- and this migration then skips them (docs/retention.md).

ALTER TABLE jobs
    ADD COLUMN IF NOT EXISTS retain_s integer,
    ADD COLUMN IF NOT EXISTS expires_at timestamptz;
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_retain_s integer CHECK (max_retain_s > 0);

-- Finished jobs the janitor has not settled yet (compacted, given their expiry).
CREATE INDEX IF NOT EXISTS jobs_unsettled_idx ON jobs (finished_at)
    WHERE finished_at IS NOT NULL AND expires_at IS NULL;
CREATE INDEX IF NOT EXISTS jobs_expiry_idx ON jobs (expires_at) WHERE expires_at IS NOT NULL;

-- The janitor deletes a job's attempts itself, with its events and webhook rows: no per-row
-- foreign-key check on the claim's attempt insert, and no cascade.
ALTER TABLE job_attempts DROP CONSTRAINT IF EXISTS job_attempts_job_id_fkey;

-- Deleting a job deletes its webhook rows: found by job, not by a scan of the outbox.
CREATE INDEX IF NOT EXISTS webhook_deliveries_job_idx ON webhook_deliveries (job_id);

CREATE TABLE IF NOT EXISTS job_tombstones (
    id         uuid PRIMARY KEY,
    tenant_id  text NOT NULL,
    deleted_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS job_tombstones_deleted_idx ON job_tombstones (deleted_at);

CREATE TABLE IF NOT EXISTS metric_totals (
    backend           integer NOT NULL,
    provider          text NOT NULL,
    jobs_created      bigint NOT NULL DEFAULT 0,
    jobs_accepted     bigint NOT NULL DEFAULT 0,
    charged_usd       numeric NOT NULL DEFAULT 0,
    attempts_started  bigint NOT NULL DEFAULT 0,
    retries           bigint NOT NULL DEFAULT 0,
    succeeded         bigint NOT NULL DEFAULT 0,
    failed            bigint NOT NULL DEFAULT 0,
    unknown           bigint NOT NULL DEFAULT 0,
    cancelled         bigint NOT NULL DEFAULT 0,
    lost              bigint NOT NULL DEFAULT 0,
    interrupted       bigint NOT NULL DEFAULT 0,
    cost_usd          numeric NOT NULL DEFAULT 0,
    cost_unknown      bigint NOT NULL DEFAULT 0,
    events_ended      bigint NOT NULL DEFAULT 0,
    queue_wait_counts bigint[],
    queue_wait_s      float8 NOT NULL DEFAULT 0,
    run_counts        bigint[],
    run_s             float8 NOT NULL DEFAULT 0,
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

-- For the counts below only (the statements write theirs out: jobstream/queries.py).
CREATE FUNCTION pg_temp.duration_histogram(seconds float8[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg((SELECT count(*) FROM unnest(seconds) AS s WHERE s <= b) ORDER BY b)
      FROM unnest('{0.05,0.1,0.25,0.5,1,2.5,5,10,30,60,120,300,600}'::float8[]) AS b
$$;

-- The totals so far, from the history the scrape used to count, on the row of backend 0: the
-- counters go on from where they stood.
INSERT INTO metric_totals (backend, provider, jobs_created, jobs_accepted, charged_usd,
                           events_ended, queue_wait_counts, queue_wait_s)
SELECT 0, provider, count(*), count(*) FILTER (WHERE status = 'succeeded'),
       coalesce(sum(charged_usd) FILTER (WHERE status = 'succeeded'), 0),
       coalesce(sum(last_seq) FILTER (WHERE finished_at IS NOT NULL), 0),
       pg_temp.duration_histogram(array_agg(extract(epoch FROM started_at - created_at)::float8)
                          FILTER (WHERE started_at IS NOT NULL)),
       coalesce(sum(extract(epoch FROM started_at - created_at)::float8)
                FILTER (WHERE started_at IS NOT NULL), 0)
  FROM jobs
 GROUP BY provider
ON CONFLICT (backend, provider) DO NOTHING;
INSERT INTO metric_totals AS m (backend, provider, attempts_started, retries, succeeded, failed,
                                unknown, cancelled, lost, interrupted, cost_usd, cost_unknown,
                                run_counts, run_s)
SELECT 0, provider, count(*), count(*) FILTER (WHERE attempt > 1),
       count(*) FILTER (WHERE outcome = 'succeeded'), count(*) FILTER (WHERE outcome = 'failed'),
       count(*) FILTER (WHERE outcome = 'unknown'), count(*) FILTER (WHERE outcome = 'cancelled'),
       count(*) FILTER (WHERE outcome = 'lost'), count(*) FILTER (WHERE outcome = 'interrupted'),
       coalesce(sum(cost_usd), 0), count(*) FILTER (WHERE NOT cost_known),
       pg_temp.duration_histogram(array_agg(extract(epoch FROM finished_at - started_at)::float8)
                          FILTER (WHERE finished_at IS NOT NULL)),
       coalesce(sum(extract(epoch FROM finished_at - started_at)::float8)
                FILTER (WHERE finished_at IS NOT NULL), 0)
  FROM job_attempts
 GROUP BY provider
ON CONFLICT (backend, provider) DO UPDATE
   SET attempts_started = EXCLUDED.attempts_started, retries = EXCLUDED.retries,
       succeeded = EXCLUDED.succeeded, failed = EXCLUDED.failed, unknown = EXCLUDED.unknown,
       cancelled = EXCLUDED.cancelled, lost = EXCLUDED.lost, interrupted = EXCLUDED.interrupted,
       cost_usd = EXCLUDED.cost_usd, cost_unknown = EXCLUDED.cost_unknown,
       run_counts = EXCLUDED.run_counts, run_s = EXCLUDED.run_s;

-- Routines live in schema.sql alone: add_counts and sum_counts, which this version brought, are
-- there, and jobstream/migrations.py runs them after the migrations.
