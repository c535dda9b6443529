-- Version 6 to 7: a new job's `queued` event at seq 1 is no longer stored (INSERT_JOBS); readers
-- read the log through the job_log view, which gives it from the job. No table changes: logs
-- stored before keep their seq 1 row, and the view reads it as stored.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

-- A job's log as readers see it (EVENTS_AFTER, EVENTS_AFTER_MANY). A log opens with the job's
-- `queued` status at seq 1, and for a job INSERT_JOBS made that event has no row: it is the same
-- for every job and is read from the job. Its row was a heap tuple and a key entry beside the
-- job's for every create: 5-13 % of the backend's CPU for a batch of 1,000 (3-9 ms of 54-75).
-- It is given while the stored log starts at seq 2 or is empty: a log that stores its seq 1
-- (made before schema version 7, or an operator's retry, whose `queued` names the dead job) is
-- read as stored, and one whose head was deleted still starts past the gap, so its readers are
-- told to resync. With the seq bounded past 1 (every read but the first of a stream),
-- PostgreSQL drops the second branch at plan time.
CREATE OR REPLACE VIEW job_log AS
SELECT job_id, seq, attempt, type, data, created_at
  FROM job_events
 UNION ALL
SELECT j.id, 1::bigint, 0, 'status'::text, '{"status": "queued"}'::jsonb, j.created_at
  FROM jobs j
 WHERE coalesce((SELECT min(e.seq) FROM job_events e WHERE e.job_id = j.id), 2) = 2;
