"""What tests of the jobs API send and check: a job's body, the problem media type, the jobs
table's size."""

from __future__ import annotations

from typing import Any

import asyncpg

PROBLEM = "application/problem+json"


def job_body(**fields: Any) -> dict[str, Any]:
    """A create request for a short simulated job; `fields` add to it or replace its own."""
    return {"prompt": "Explain leases", "simulate": {"tokens": 5}, **fields}


async def job_count(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval("SELECT count(*) FROM jobs")
    return count
