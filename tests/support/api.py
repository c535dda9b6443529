"""What tests of the jobs API send and check: a job's body, a job made over HTTP, the problem
media type, the jobs table's size, the hub's followers."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from jobstream.server.hub import Hub
from tests.support.polling import eventually

PROBLEM = "application/problem+json"


def job_body(**fields: Any) -> dict[str, Any]:
    """A create request for a short simulated job; `fields` add to it or replace its own."""
    return {"prompt": "Explain leases", "simulate": {"tokens": 5}, **fields}


async def job_count(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval("SELECT count(*) FROM jobs")
    return count


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    """POST /api/jobs with job_body(**fields); the 202's body."""
    response = await client.post("/api/jobs", json=job_body(**fields))
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


async def until_followers(hub: Hub, n: int, *, what: str | None = None) -> None:
    """Wait until `n` streams follow jobs through `hub`."""

    async def followers() -> int:
        return hub.subscribers

    await eventually(followers, lambda count: count == n, what=what or f"{n} streams follow")
