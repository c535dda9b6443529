-- An attempt's token text: the worker's batched appends (worker/token_writes.py through
-- jobstream/token_appends.py) and what the attempt reads back after a write in doubt.

-- name: APPEND_TOKENS_MANY
-- Append token chunks for many attempts at once (a worker's streams of one write tick, or one
-- attempt alone), each at the offset it expects: the characters of its attempt's text it knows
-- are in the log. Per attempt a compare-and-set: its chunks are inserted only if the log holds
-- exactly that many characters of its text, and the offset moves to the new end. A write whose
-- commit reply was lost may still commit later (a half-open connection delivers it after the
-- writer has moved on); its offset is stale by then, so it lands nowhere instead of twice.
-- Fenced per attempt on its run token: a fenced-out or refused attempt changes nothing and the
-- others land. `held` (read from the statement's snapshot) tells a write refused for its offset
-- (held, last_seq NULL) from a fenced one (not held): a job that moves on never comes back to
-- the same run_token, so a snapshot that says "not held" is right.
-- Per attempt: $1 job, $2 run token, $3 attempt, $4 expected offset, $5 offset after, $6 its
-- number of chunks; per chunk, in order: $7 text, $8 its attempt's ordinal (from 1) in $1.
WITH input AS (
    SELECT *
      FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bigint[], $5::bigint[], $6::int[])
           WITH ORDINALITY AS i (job_id, run_token, attempt, at, upto, n, ord)
), bumped AS (
    UPDATE jobs j
       SET last_seq = j.last_seq + i.n, updated_at = statement_timestamp(),
           text_attempt = i.attempt, text_chars = i.upto
      FROM input i
     WHERE j.id = i.job_id AND j.run_token = i.run_token AND j.status IN ('running', 'cancelling')
       AND CASE WHEN j.text_attempt = i.attempt THEN j.text_chars ELSE 0 END = i.at
    RETURNING j.id, j.last_seq, i.attempt, i.n, i.ord
), notified AS (
    -- One NOTIFY for up to 100 jobs, not one a job: with 1,000 streams a NOTIFY per job cost
    -- the statement 15 of its 73 ms, and the server a message per job. A payload holds at most
    -- 8,000 bytes; an item ("<uuid>:<seq>,") at most 57.
    SELECT pg_notify('jobstream_events', string_agg(id::text || ':' || last_seq, ','))
      FROM (SELECT id, last_seq, (row_number() OVER () - 1) / 100 AS page FROM bumped) b
     GROUP BY page
), chunks AS (
    SELECT c.owner, c.chunk, row_number() OVER (PARTITION BY c.owner ORDER BY c.k) AS nth
      FROM unnest($7::text[], $8::bigint[]) WITH ORDINALITY AS c (chunk, owner, k)
), inserted AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT b.id, b.last_seq - b.n + c.nth, b.attempt, 'token', jsonb_build_object('text', c.chunk)
      FROM bumped b
      JOIN chunks c ON c.owner = b.ord
)
SELECT i.ord, b.last_seq,
       coalesce(j.run_token = i.run_token AND j.status IN ('running', 'cancelling'), false)
           AS held,
       -- Read, so that `notified` runs (a CTE that changes nothing runs only when read); the
       -- input is never empty, so this is evaluated.
       (SELECT count(*) FROM notified) AS notices
  FROM input i
  LEFT JOIN jobs j ON j.id = i.job_id
  LEFT JOIN bumped b ON b.ord = i.ord
 ORDER BY i.ord

-- name: ATTEMPT_TEXT_WRITTEN
-- How much of an attempt's text is in the log (the offset APPEND_TOKENS_MANY compares), and whether
-- the attempt still holds its job: after a write in doubt, the attempt reads this instead of
-- guessing whether its chunk landed.
SELECT CASE WHEN text_attempt = $2 THEN text_chars ELSE 0 END AS chars,
       run_token = $3 AND status IN ('running', 'cancelling') AS held
  FROM jobs
 WHERE id = $1

-- name: ATTEMPT_TEXT
-- The snapshot: the text the current attempt has produced so far, its token rows' and the token
-- a row of several events may hold (a success's last chunk, in its `done` row:
-- job_events.earlier). One read of the job's rows; the earlier events are taken apart only
-- where a row has them (two rows an attempt at most). Through job_log, which takes every row
-- apart, 5,000 tokens took 3.2 ms instead of 1.1.
SELECT coalesce(string_agg(
           CASE WHEN type = 'token' THEN data->>'text'
                ELSE (SELECT string_agg(x.item->1->>'text', '' ORDER BY x.k)
                        FROM jsonb_array_elements(earlier) WITH ORDINALITY AS x (item, k)
                       WHERE x.item->>0 = 'token') END,
           '' ORDER BY seq), '')
  FROM job_events
 WHERE job_id = $1 AND attempt = $2 AND (type = 'token' OR earlier IS NOT NULL)
