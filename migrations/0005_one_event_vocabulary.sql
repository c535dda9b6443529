-- Version 4 to 5: `result` leaves the event types. Nothing ever appended one (a job's result
-- travels in its `done` event), so the CHECK now lists exactly the types the code writes.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).
-- The new CHECK reads every row of job_events once, under a lock that holds back its writes
-- (about a second per ten million events): no row has to change.

ALTER TABLE job_events
    DROP CONSTRAINT IF EXISTS job_events_type_check,
    ADD CONSTRAINT job_events_type_check CHECK (type IN
        ('status', 'reset', 'token', 'usage', 'attempt_error', 'done'));
