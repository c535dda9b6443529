-- Version 5 to 6: add_counts becomes one inlinable expression (the upserts of metric_totals merge
-- with it instead of writing the merge out), and duration_counts counts a sorted array of durations.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py). No table
-- changes; sum_counts keeps add_counts, whose signature is the same.

-- Histograms: arrays of cumulative counts, one per bound of DURATION_BUCKETS (jobstream/types.py,
-- whose test reads these two functions). Both are one plain expression, so PostgreSQL inlines
-- them into the statements that call them: no function call per row or per statement.

-- Element-wise sum of two histograms' counts; NULL stands for none. The upserts of metric_totals
-- merge with it, and sum_counts below folds many rows.
CREATE OR REPLACE FUNCTION add_counts(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a
                ELSE ARRAY[a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5],
                           a[6] + b[6], a[7] + b[7], a[8] + b[8], a[9] + b[9], a[10] + b[10],
                           a[11] + b[11], a[12] + b[12], a[13] + b[13]]
           END
$$;

-- The histogram of some durations in seconds, given sorted ascending: width_bucket(bound, sorted)
-- is how many are at or under the bound. Called as duration_counts(array_agg(x ORDER BY x)),
-- which reads the rows once. Only the one-row FINISH_ATTEMPT calls it: on a 64-row batch the sort
-- costs about 30 us more than 13 `count(*) FILTER (WHERE x <= bound)` (measured with
-- pg_stat_statements, PostgreSQL 18), so CLAIM_JOBS and SUCCEED_ATTEMPTS keep those.
CREATE OR REPLACE FUNCTION duration_counts(sorted float8[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[width_bucket(0.05, sorted), width_bucket(0.1, sorted),
                 width_bucket(0.25, sorted), width_bucket(0.5, sorted), width_bucket(1, sorted),
                 width_bucket(2.5, sorted), width_bucket(5, sorted), width_bucket(10, sorted),
                 width_bucket(30, sorted), width_bucket(60, sorted), width_bucket(120, sorted),
                 width_bucket(300, sorted), width_bucket(600, sorted)]::bigint[]
$$;
