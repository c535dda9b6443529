"""jobstream/chats.py: a chat's newest job, found by its jobs' keys on tenant_jobs_chat_idx."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson

from jobstream import chats
from jobstream.sql import queries

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def keyed(pool: asyncpg.Pool, tenant: str, key: str | None, minutes: int) -> uuid.UUID:
    """A job's tenant_jobs row (the row a create writes), `minutes` after T0."""
    job_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO tenant_jobs (tenant_id, created_at, job_id, idempotency_key)"
        " VALUES ($1, $2, $3, $4)",
        tenant, T0 + timedelta(minutes=minutes), job_id, key,
    )  # fmt: skip
    return job_id


async def test_a_chats_newest_job_is_found_by_its_keys(pool: asyncpg.Pool) -> None:
    older = await keyed(pool, "a", chats.job_key("c1", {"n": 1}), 1)
    newest = await keyed(pool, "a", chats.job_key("c1", {"n": 2}), 3)
    await keyed(pool, "a", chats.job_key("c2", {"n": 1}), 5)  # another chat
    await keyed(pool, "b", chats.job_key("c1", {"n": 3}), 9)  # another tenant's chat c1
    await keyed(pool, "a", "my-own-key", 7)
    await keyed(pool, "a", None, 8)
    assert await chats.latest_job(pool, "a", "c1") == newest != older
    assert await chats.latest_job(pool, "a", "c3") is None
    assert await chats.latest_job(pool, "nobody", "c1") is None
    # A chat id holds anything a client sends: the key is a digest of it.
    odd = "chat:with:colons/and slashes " + "é" * 500
    assert await chats.latest_job(pool, "a", odd) is None
    made = await keyed(pool, "a", chats.job_key(odd, {"n": 1}), 10)
    assert await chats.latest_job(pool, "a", odd) == made


async def test_the_lookup_can_use_the_chats_index(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        # A table of a few rows is read whole whatever its indexes: with that way refused,
        # the plan shows whether the statement's predicate lets PostgreSQL use the index.
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + queries.CHAT_LATEST_JOB, "a", chats.chat_digest("c1")
        )
    assert "tenant_jobs_chat_idx" in orjson.dumps(plan).decode()
