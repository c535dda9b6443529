-- Version 12 to 13: jobs are named functions (`@app.job`, jobstream/app.py), the built-in one
-- `llm`. A job carries its name, the claim takes only names its worker runs (a rolling deploy
-- leaves a new kind queued for a worker that has it), a handler writes `progress` events, and a
-- failed attempt keeps its traceback (operators only, never in a public response).
-- The queue's key gains the name: jobs_runnable_idx is built again, and claim_jobs, whose
-- arguments and result change, and job_queues, whose columns change, are dropped here and made
-- again from schema.sql's routines. Workers of version 12 call the old claim_jobs, which is gone:
-- stop them before this runs (start one new process, it migrates; then start the rest).
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP FUNCTION IF EXISTS claim_jobs(text[], text, float8, timestamptz, text[], integer[], text[], integer);
DROP VIEW IF EXISTS job_queues;

ALTER TABLE jobs ADD COLUMN job_name text NOT NULL DEFAULT 'llm';

DROP INDEX IF EXISTS jobs_runnable_idx;
CREATE INDEX jobs_runnable_idx
    ON jobs (tenant_id, provider, job_name, priority, run_after, created_at)
    WHERE status = 'queued';

ALTER TABLE job_attempts ADD COLUMN error_trace text;

ALTER TABLE job_events
    DROP CONSTRAINT IF EXISTS job_events_type_check,
    ADD CONSTRAINT job_events_type_check CHECK (type IN
        ('status', 'reset', 'token', 'progress', 'usage', 'attempt_error', 'done'));

ALTER TYPE claimed_job ADD ATTRIBUTE job_name text;
