"""The webhook side of a test database: the signing secret tests configure, and the outbox rows
(`webhook_deliveries`) a job's end leaves."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import asyncpg

from jobstream import jobs
from tests.support.clock import ManualClock
from tests.support.workers import create_job

SECRET = "whsec_" + base64.b64encode(b"a test key of thirty-two bytes!!").decode()


async def deliveries(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM webhook_deliveries WHERE job_id = $1", job_id)
    return [dict(r) for r in rows]


async def the_delivery(pool: asyncpg.Pool, job_id: uuid.UUID) -> dict[str, Any]:
    """The job's one delivery row."""
    [row] = await deliveries(pool, job_id)
    return row


async def pending_delivery(pool: asyncpg.Pool, url: str, clock: ManualClock) -> uuid.UUID:
    """A job whose delivery row is due at `clock`'s now: it was cancelled before it ran."""
    job_id = await create_job(pool, webhook_url=url)
    await jobs.cancel(pool, "default", job_id, clock)
    return job_id
