-- Version 20 to 21: the events one statement writes for one job share a row.
-- - job_events.earlier: the events before the row's own, as [type, data] pairs at the seqs just
--   before its seq (schema.sql says which events go there). The claim writes an attempt's
--   `reset` and `status` as one row, the success its last chunk, `usage` and `done`.
-- - job_log_rows (a routine, made after this): the log as stored, which the streams' reads
--   (EVENTS_AFTER) return; job_log expands it.
-- Safe under load: a nullable column with no default changes the catalog only (no row is
-- rewritten), under a lock held for that instant. Every row written before has no `earlier`
-- and reads as it did. Code of version 20 still running beside this one (a rolling deploy)
-- reads events through job_log, which the routines make anew: its streams see a grouped row's
-- events apart, as this version's do.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

ALTER TABLE job_events ADD COLUMN earlier jsonb;
