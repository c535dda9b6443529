-- Version 6 to 7: a new job's `queued` event at seq 1 is no longer stored (INSERT_JOBS); readers
-- read the log through the job_log view, which gives it from the job. No table changes: logs
-- stored before keep their seq 1 row, and the view reads it as stored.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

-- Routines live in schema.sql alone: job_log, which this version brought, is there, and
-- jobstream/migrations.py runs it after the migrations.
