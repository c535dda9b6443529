-- Version 16 to 17: chats (POST /api/chat, server/chat_api.py). A chat's jobs are keyed
-- `chat:<the chat id's digest>:<the request's digest>` (jobstream/chats.py), so that a retried
-- POST finds its job by the key's unique index. This index finds a chat's newest job by the
-- chat's part of the key (CHAT_LATEST_JOB), for the reconnect and the stop that name the chat
-- alone. Partial: only chats' keys have entries, and it goes with its job's tenant_jobs row.
-- Additive: code of version 16 neither reads nor writes it.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

CREATE INDEX tenant_jobs_chat_idx
    ON tenant_jobs (tenant_id, split_part(idempotency_key, ':', 2), created_at, job_id)
    WHERE idempotency_key LIKE 'chat:%';
