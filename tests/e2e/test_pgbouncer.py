"""A real server and worker through a real PgBouncer in transaction mode (deploy/pgbouncer/).

DATABASE_URL is PgBouncer's, JOBSTREAM_DIRECT_DATABASE_URL the PostgreSQL's: LISTEN, the schema
change and the janitor's session lock must go direct, everything else through the pooler with no
prepared statements kept (docs/deployment.md). Polls and re-checks are a minute here, so a job
that finishes and a follower that sees its tokens prove LISTEN/NOTIFY works on the direct URL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from tests.e2e.conftest import Stack
from tests.support import pgbouncer
from tests.support.polling import eventually
from tests.support.processes import Processes
from tests.support.simulated_text import expected_text
from tests.support.sse_client import read_stream, reassemble

JOBS = 20
# Long enough that a follower is reading before the job ends, short enough for a quick test.
FOLLOWED = {"tokens": 40, "tokens_per_second": 40, "first_token_delay_s": 0}
QUICK = {"tokens": 10, "tokens_per_second": 1000, "first_token_delay_s": 0}


@pytest.fixture
def pgbouncer_installed() -> None:
    if reason := pgbouncer.missing():
        pytest.skip(reason)


def body(prompt: str, simulate: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": simulate["tokens"], "simulate": simulate}


async def finished(stack: Stack, job_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        job: dict[str, Any] = (await stack.http.get(f"/api/jobs/{job_id}")).json()
        return job

    return await eventually(
        read,
        lambda job: job["status"] in ("succeeded", "failed", "cancelled"),
        what=f"job {job_id} ends",
        timeout_s=30,
        interval_s=0.1,
    )


async def session_backends(direct_url: str) -> set[str]:
    """application_name of every backend of this database: the direct sessions show by name."""
    conn = await asyncpg.connect(direct_url)
    try:
        rows = await conn.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {row["application_name"] for row in rows}


async def test_server_and_worker_through_pgbouncer_in_transaction_mode(
    pgbouncer_installed: None, process_group: Processes, database_url: str
) -> None:
    async with pgbouncer.pgbouncer(database_url) as pooled_url:
        stack = Stack(process_group, pooled_url)
        stack.env |= {
            "JOBSTREAM_DIRECT_DATABASE_URL": database_url,
            # Only NOTIFY wakes the worker and the server's hub in time for the bounds below.
            "JOBSTREAM_POLL_INTERVAL_S": "60",
            "JOBSTREAM_HUB_RECHECK_S": "60",
            # Several pooled clients per process, so transactions do move between server
            # connections (PgBouncer's default_pool_size is 20).
            "JOBSTREAM_DB_POOL_MIN": "4",
            # The janitor's round, with its session lock, on the direct URL.
            "JOBSTREAM_JANITOR_INTERVAL_S": "0.5",
            "JOBSTREAM_COMPACT_AFTER_S": "0",
        }
        await stack.start()
        try:
            followed = await stack.create_job(body("followed", FOLLOWED))
            reading = asyncio.create_task(read_stream(stack.http, followed["events_url"]))
            await stack.streams_open(1)
            jobs = [followed]
            for i in range(JOBS - 1):
                jobs.append(await stack.create_job(body(f"job {i}", QUICK)))
            stream = await asyncio.wait_for(reading, 30)
            ends = [await finished(stack, job["id"]) for job in jobs]
            assert stack.worker is not None
            await stack.worker.wait_for_log("janitor_round", timeout_s=20)
            backends = await session_backends(database_url)
        finally:
            await stack.aclose()
    assert stream.ended
    assert reassemble(stream.events) == expected_text("followed", 40)
    assert [job["status"] for job in ends] == ["succeeded"] * JOBS
    assert ends[0]["result"]["text"] == expected_text("followed", 40)
    for i, job in enumerate(ends[1:]):
        assert job["result"]["text"] == expected_text(f"job {i}", 10)
    # The LISTEN sessions are direct (PgBouncer would not keep them).
    assert "jobstream-hub" in backends
    assert any(name.startswith("jobstream-worker-listener:") for name in backends)
