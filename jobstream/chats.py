"""Chats (POST /api/chat, docs/chat.md): a chat is the jobs its requests made, found by their
idempotency keys. No table of chats: a key says which chat its job is of, and the key's row goes
with its job, so a chat's memory is its jobs' (retention deletes both).

A job's key is `chat:<digest of the chat id>:<digest of the request>`. The chat's part is a
digest because a chat id is the client's text (any length, any characters, a `:` among them),
where a key is 1 to 255 visible ASCII characters. The request's part covers what makes the job
and which message it answers, so the same POST sent again finds its job, and a new message, an
edit or a regenerate makes a new one.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from jobstream.db import Queryable
from jobstream.sql import queries

KEY_PREFIX = "chat"
_DIGEST_CHARS = 32  # 128 bits of sha256: no two chats (or requests of one chat) share one


def chat_digest(chat_id: str) -> str:
    """The chat's part of its jobs' keys."""
    return hashlib.sha256(chat_id.encode()).hexdigest()[:_DIGEST_CHARS]


def job_key(chat_id: str, request: Mapping[str, Any]) -> str:
    """The idempotency key of the job that `request` (canonical JSON: keys sorted) asks of the
    chat."""
    canonical = orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(canonical).hexdigest()[:_DIGEST_CHARS]
    return f"{KEY_PREFIX}:{chat_digest(chat_id)}:{digest}"


async def latest_job(conn: Queryable, tenant_id: str, chat_id: str) -> uuid.UUID | None:
    """The chat's newest job, None if it has none (or none left)."""
    found: uuid.UUID | None = await conn.fetchval(
        queries.CHAT_LATEST_JOB, tenant_id, chat_digest(chat_id)
    )
    return found
