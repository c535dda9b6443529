"""In-process workers and the job facts worker tests assert on."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from jobstream import creates, events, job_reads
from jobstream.events import Event
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.sql import queries
from jobstream.worker.worker import Worker
from tests.support.clock import ManualClock
from tests.support.polling import eventually

Row = dict[str, Any]


def fast(tokens: int, **simulate: Any) -> dict[str, Any]:
    """A `simulate` object that produces `tokens` counted tokens with no pauses."""
    return {
        "tokens": tokens,
        "pattern": "count",
        "tokens_per_second": 0,
        "first_token_delay_s": 0,
        **simulate,
    }


def counted_text(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


def manual_clock() -> ManualClock:
    """A test clock a minute ahead of the database's, so jobs created now are already due."""
    return ManualClock(datetime.now(UTC) + timedelta(minutes=1))


async def create_job(pool: asyncpg.Pool, **fields: Any) -> uuid.UUID:
    fields.setdefault("prompt", "tell me a story")
    fields.setdefault("provider", "simulated")
    created = await creates.create(pool, "default", JobSpec(**fields), str(uuid.uuid4()))
    job_id: uuid.UUID = created.job.id
    return job_id


async def job_row(pool: asyncpg.Pool, job_id: uuid.UUID) -> Row:
    """Every column of the job, the worker's own (run_token, lease_until...) too."""
    row = await pool.fetchrow(queries.SELECT_JOB, job_id, "default")
    assert row is not None, f"no job {job_id}"
    return dict(row)


async def attempt_rows(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[Row]:
    """The job's attempts as the API reads them, as dicts: tests compare them whole."""
    return [dataclasses.asdict(a) for a in await job_reads.attempts(pool, job_id)]


async def event_list(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[Event]:
    return await events.read_after(pool, job_id, 0)


def reassemble(log: list[Event]) -> str:
    """What a client shows (docs/design.md): clear on `reset`, append on `token`."""
    text = ""
    for event in log:
        if event.type == "reset":
            text = ""
        elif event.type == "token":
            text += event.data["text"]
    return text


def summary(log: list[Event]) -> list[tuple[int, str, str | None]]:
    """(attempt, type, status) for every event but tokens: the shape of a job's history."""
    return [(e.attempt, e.type, e.data.get("status")) for e in log if e.type != "token"]


async def wait_for_job(
    pool: asyncpg.Pool,
    job_id: uuid.UUID,
    accept: Callable[[Row], bool],
    *,
    what: str,
    timeout_s: float = 10.0,
) -> Row:
    return await eventually(lambda: job_row(pool, job_id), accept, what=what, timeout_s=timeout_s)


async def wait_for_status(
    pool: asyncpg.Pool, job_id: uuid.UUID, status: str, *, timeout_s: float = 10.0
) -> Row:
    return await wait_for_job(
        pool, job_id, lambda j: j["status"] == status, what=f"status {status}", timeout_s=timeout_s
    )


@asynccontextmanager
async def running_worker(settings: Settings, **options: Any) -> AsyncIterator[Worker]:
    """A Worker running in this loop, listening before the body starts, stopped after it."""
    worker = Worker(settings, **options)
    task = asyncio.create_task(worker.run(), name=f"test-worker:{worker.worker_id}")
    try:
        async with asyncio.timeout(10):
            listening = asyncio.ensure_future(worker.listening.wait())
            await asyncio.wait({listening, task}, return_when=asyncio.FIRST_COMPLETED)
            listening.cancel()
            if task.done():
                task.result()  # surfaces a start-up failure
        yield worker
    finally:
        worker.stop()
        async with asyncio.timeout(20):
            await task


async def wait_idle(
    worker: Worker, *, what: str = "the worker is idle", timeout_s: float = 10.0
) -> None:
    """Return once no attempt of `worker` is running."""

    async def running() -> int:
        return worker.running_count

    await eventually(running, lambda n: n == 0, what=what, timeout_s=timeout_s)
