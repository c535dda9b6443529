-- Version 5 to 6: add_counts becomes one inlinable expression (the upserts of metric_totals merge
-- with it instead of writing the merge out), and duration_counts counts a sorted array of durations.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py). No table
-- changes; sum_counts keeps add_counts, whose signature is the same.

-- Routines live in schema.sql alone: add_counts and duration_counts, as this version made them,
-- are there, and jobstream/migrations.py runs them after the migrations.
