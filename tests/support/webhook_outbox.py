"""The webhook side of a test database: the signing secret tests configure, and the outbox rows
(`webhook_deliveries`) a job's end leaves."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import asyncpg

SECRET = "whsec_" + base64.b64encode(b"a test key of thirty-two bytes!!").decode()


async def deliveries(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM webhook_deliveries WHERE job_id = $1", job_id)
    return [dict(r) for r in rows]
