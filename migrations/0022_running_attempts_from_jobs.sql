-- Version 21 to 22: the attempts under way are read from the running jobs.
-- - job_attempts_running_idx goes: a job is running or cancelling exactly while its current
--   attempt's outcome is `running` (the claim and every end write both in one statement), so
--   the claim's provider limit, the metrics, the estimates and the dashboard count the running
--   jobs (jobs_active_tenant_idx) instead. A claim writes one index entry fewer.
-- Safe under load: claim_jobs, a routine, is made anew with this version, so every worker's
-- claim counts the running jobs at once. A server of version 21 still running beside this one
-- (a rolling deploy) reads the same counts for its metrics, estimates and dashboard from
-- job_attempts without the index, a scan of that table each, until it is replaced. DROP INDEX waits for the statements on job_attempts under way, within the
-- migration's lock timeout, and is retried.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP INDEX IF EXISTS job_attempts_running_idx;
