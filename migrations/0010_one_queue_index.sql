-- Version 9 to 10: LOCK_PROVIDERS finds out whether a provider has a runnable job by walking the
-- queues, as CLAIM_JOBS does, so the index that answered it alone goes: every create wrote an
-- entry in it (schema.sql says what that cost). That walk becomes a view both statements read.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP INDEX IF EXISTS jobs_queued_provider_idx;

-- Routines live in schema.sql alone: job_queues, which this version brought, is there, and
-- jobstream/migrations.py runs it after the migrations.
