-- Version 2 to 3: an operator's retry of a dead job is a new job linked to the old one, and a
-- token append is a compare-and-set on its attempt's text offset.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).
-- Only metadata changes (no default that needs a rewrite, no index build): instant whatever the
-- size of `jobs`.

ALTER TABLE jobs
    ADD COLUMN IF NOT EXISTS retry_of uuid,
    ADD COLUMN IF NOT EXISTS retried_as uuid,
    ADD COLUMN IF NOT EXISTS text_attempt integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS text_chars bigint NOT NULL DEFAULT 0;
