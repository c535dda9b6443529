-- Version 8 to 9: jobs leaves a fifth of each page free, so that the token writes' updates of a
-- running job's row stay on its page (HOT: no index entry written); schema.sql says what it
-- saves. Pages written before keep what they hold: rows inserted or moved from now on are
-- placed with the room (a VACUUM FULL or pg_repack would apply it to the whole table now).
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

ALTER TABLE jobs SET (fillfactor = 80);
