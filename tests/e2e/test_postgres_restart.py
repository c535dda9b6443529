"""PostgreSQL restarted under running jobs and open streams (docs/design.md, invariant 10).

A crash-style stop (`pg_ctl -m immediate`) while a real worker is mid-stream and readers follow
over SSE: when PostgreSQL is back, every job ends `succeeded` exactly once, with the exact text,
and every reader has seen each committed event once, in order.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from jobstream import db, events
from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.follower import Follower
from tests.e2e.conftest import Stack
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.sse_client import reassemble

TOKENS = 120


def counted(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


async def follow(client: httpx.AsyncClient, job_id: str, first_token: asyncio.Event) -> list[Any]:
    seen: list[dict[str, Any]] = []
    async for event in Follower(client, job_id, backoff_max_s=0.5).events():
        seen.append(event)
        if event["type"] == "token":
            first_token.set()
    return seen


async def test_jobs_and_streams_survive_a_postgres_crash_restart(
    stack: Stack,
    embedded_postgres: EmbeddedPostgres,
    database_url: str,
) -> None:
    simulate = {"tokens": TOKENS, "pattern": "count", "tokens_per_second": 40,
                "first_token_delay_s": 0}  # fmt: skip
    jobs = [
        await stack.create_job({"prompt": f"job {i}", "max_tokens": TOKENS, "simulate": simulate})
        for i in range(3)
    ]
    async with http_client(base_url=stack.base_url, timeout=10) as client:
        started = [asyncio.Event() for _ in jobs]
        readers = [
            asyncio.create_task(follow(client, job["id"], seen))
            for job, seen in zip(jobs, started, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(seen.wait() for seen in started)), 20)
        await asyncio.to_thread(embedded_postgres.stop, "immediate")
        await asyncio.to_thread(embedded_postgres.start)
        results = await asyncio.wait_for(asyncio.gather(*readers), 60)

    pool = await db.create_pool(database_url, min_size=1, max_size=2)
    try:
        for job, seen in zip(jobs, results, strict=True):
            job_id = uuid.UUID(job["id"])
            row = await eventually(
                lambda: pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id),  # noqa: B023
                lambda r: r is not None and r["status"] == "succeeded",
                what="the job succeeded",
            )
            assert row is not None
            accepted = await pool.fetchval(
                "SELECT count(*) FROM job_attempts WHERE job_id = $1 AND outcome = 'succeeded'",
                job_id,
            )
            assert accepted == 1
            log = [e.to_json() for e in await events.read_after(pool, job_id, 0)]
            assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
            assert seen == log
            assert reassemble(seen) == counted(TOKENS)
            assert seen[-1]["type"] == "done"
            assert seen[-1]["result"]["text"] == counted(TOKENS)
    finally:
        await pool.close()
