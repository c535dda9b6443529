-- Version 15 to 16: the price catalogue (jobstream/prices.py). An attempt's row says how the
-- price of its cost was found, so that a cost priced at a provider's default (a model the
-- catalogue does not know) is told apart from a list price. FINISH_ATTEMPT, SUCCEED_ATTEMPTS
-- and JOURNAL_STEPS write it: statements, not data; attempts made before stay NULL.
-- Additive: code of version 15 neither reads nor writes it.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

ALTER TABLE job_attempts ADD COLUMN price_source text
    CHECK (price_source IN ('catalogue', 'operator', 'default'));
