-- Version 18 to 19: a job's trace context (docs/deployment.md, "Traces").
-- - jobs.traceparent: the W3C traceparent of the span that created the job, written by
--   INSERT_JOBS when the server traces; the worker's claim, attempts, provider calls and steps
--   continue that trace, so one trace shows a job from its request to its result across the
--   server's and the worker's processes. NULL when traces are off.
-- - claimed_job.traceparent: claim_jobs hands it to the worker with the rest of the claimed row.
--   The routines after the migrations make claim_jobs anew; the one this replaces builds the old
--   type's ten fields, so it is dropped here first.
-- Additive for code of version 18: a worker before it reads claim_jobs' columns by name and never
-- the new one; a server before it writes no traceparent (NULL).
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP FUNCTION IF EXISTS claim_jobs(text[], text, float8, timestamptz, text[], integer[], text[],
                                   integer, text[], float8);

ALTER TABLE jobs ADD COLUMN traceparent text;

ALTER TYPE claimed_job ADD ATTRIBUTE traceparent text;
