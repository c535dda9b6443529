-- Version 22 to 23: an attempt's row is written once, at its end (job_attempts in schema.sql).
-- - The running attempt is its job's row; its `job_attempts` row is inserted by the statement
--   that ends it, not by the claim: a claim and an end write one heap row and three index
--   entries fewer per attempt. Its start comes with the claim (claimed_job.started_at), which
--   the worker passes to the end, and is the created_at of the event row that opens its log.
-- - The attempts running now have their rows, from the claims of version 22: their ends update
--   those rows (SUCCEED_ATTEMPTS, FINISH_ATTEMPT).
-- - job_steps.price_source: how each journaled step's cost was priced, so that FINISH_ATTEMPT
--   gives a lost attempt the least certain of its steps' (JOURNAL_STEPS added it to the running
--   attempt's row).
-- - claim_jobs gains `attempt_rows`, true unless the caller passes false, and claimed_job the
--   attempt's start: the routines after the migrations make claim_jobs anew, so the one with
--   the old arguments, which builds the old type, is dropped here first.
-- Safe under load, and for workers of version 22 during a rolling deploy: their claims call
-- claim_jobs without the new argument, which inserts the attempt's row as before, they read
-- claim_jobs' columns by name, and the statements that end their attempts update that row.
-- Servers of version 22 list a running attempt only when a worker of version 22 claimed it, and
-- the reaper of a worker of version 22 ends a lost attempt of a newer worker without writing its
-- row (its job moves on as before): roll the workers soon after the first new process starts.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP FUNCTION IF EXISTS claim_jobs(text[], text, float8, timestamptz, text[], integer[], text[],
                                   integer, text[], float8);

ALTER TYPE claimed_job ADD ATTRIBUTE started_at timestamptz;

ALTER TABLE job_steps ADD COLUMN price_source text;
