-- Version 17 to 18: the operator's dashboard (/admin/, server/admin_api.py, docs/admin.md).
-- - metric_minutes: the counters of metric_totals as they stood at the end of each minute, which
--   the janitor writes (jobstream/series.py); a minute's throughput and percentiles are the
--   difference of two rows, so the overview reads at most 61 rows, never history.
-- - attempt_minutes: what the attempts that ended in a minute cost, by tenant, job name and
--   model, and how many jobs they ended failed or dead; the janitor folds it once a minute from
--   the attempts that ended (job_attempts_finished_idx).
-- - job_attempts_finished_idx: that fold's read. Partial on finished_at IS NOT NULL, so a claim
--   (which inserts the attempt, running) adds no entry; an attempt's end already rewrites every
--   index entry of its row (its outcome is in job_attempts_running_idx's predicate), and adds
--   one here, on the right-hand page.
-- - jobs_failed_idx: failed and dead jobs, newest first: the dead letters and the failed/dead
--   jobs page read it, never all jobs; jobs_failed_groups_idx: the same jobs in the order of the
--   overview's groups (job name, tenant, status), which it counts without hashing them (at
--   40,000 such jobs, 7.6 ms a count against 18.9). Entries are added only when a job ends
--   failed or dead (and when such a row is rewritten: settled, retried).
-- Additive: code of version 17 neither reads nor writes them.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

CREATE TABLE metric_minutes (
    minute            timestamptz PRIMARY KEY,
    jobs_created      bigint NOT NULL,
    jobs_accepted     bigint NOT NULL,
    first_attempts    bigint NOT NULL,
    queue_wait_counts bigint[],
    attempts_ended    bigint NOT NULL,
    run_counts        bigint[]
);

CREATE TABLE attempt_minutes (
    minute      timestamptz NOT NULL,
    tenant_id   text NOT NULL,
    job_name    text NOT NULL,
    model       text NOT NULL,
    cost_usd    numeric(18, 8) NOT NULL,
    jobs_failed bigint NOT NULL,
    PRIMARY KEY (minute, tenant_id, job_name, model)
);

CREATE INDEX job_attempts_finished_idx ON job_attempts (finished_at)
    WHERE finished_at IS NOT NULL;

CREATE INDEX jobs_failed_idx ON jobs (id) WHERE status IN ('failed', 'dead');
CREATE INDEX jobs_failed_groups_idx ON jobs (job_name, tenant_id, status)
    WHERE status IN ('failed', 'dead');
