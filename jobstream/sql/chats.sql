-- Chats (server/chat_api.py): a chat is the jobs its POSTs made, found by their keys
-- (jobstream/chats.py).

-- name: CHAT_LATEST_JOB
-- The newest job of chat $2 (its id's digest) of tenant $1, on tenant_jobs_chat_idx: the
-- predicate is the index's, word for word, so that the planner can use it.
SELECT job_id
  FROM tenant_jobs
 WHERE tenant_id = $1
   AND idempotency_key LIKE 'chat:%'
   AND split_part(idempotency_key, ':', 2) = $2
 ORDER BY created_at DESC, job_id DESC
 LIMIT 1
