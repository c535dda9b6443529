"""The event contract every way a job can end: each attempt opens with `reset`, `usage` is told
when known, and `done` is the last event whatever the end (docs/design.md, "Events")."""

from __future__ import annotations

import uuid
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, creates, events, job_reads, jobs
from jobstream.jobspec import JobSpec
from jobstream.usage import Usage
from tests.support import attempt_driver as drive
from tests.support.clock import ManualClock

USAGE = Usage(input_tokens=2, output_tokens=3, cost_usd=Decimal("0.00001"))


async def create(pool: asyncpg.Pool) -> uuid.UUID:
    spec = JobSpec(prompt="p", provider="simulated")
    created = await creates.create(pool, "default", spec, None)
    job_id: uuid.UUID = created.job.id
    return job_id


async def types(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[tuple[int, str]]:
    return [(e.attempt, e.type) for e in await events.read_after(pool, job_id, 0)]


def check_contract(log: list[tuple[int, str]]) -> None:
    assert log[-1][1] == "done"
    assert [t for _, t in log].count("done") == 1
    for i, (attempt, kind) in enumerate(log):
        if i and attempt != log[i - 1][0]:
            assert kind == "reset", f"attempt {attempt} opens with {kind}"


async def test_success(pool: asyncpg.Pool) -> None:
    job_id = await create(pool)
    held = await drive.claim(pool)
    await drive.tokens(pool, held, ["a"])
    await drive.succeed(pool, held, "a")
    log = await types(pool, job_id)
    check_contract(log)
    assert [t for _, t in log][-2:] == ["usage", "done"]


@pytest.mark.parametrize("action", ["fail", "dead"])
async def test_failure_tells_usage_then_error_then_done(pool: asyncpg.Pool, action: str) -> None:
    job_id = await create(pool)
    held = await drive.claim(pool)
    await attempts.fail(
        pool, held, action=action, outcome="failed",  # type: ignore[arg-type]
        error={"class": "permanent", "message": "400"}, usage=USAGE, retry_in_s=0,
        clock=drive.CLOCK,
    )  # fmt: skip
    log = await types(pool, job_id)
    check_contract(log)
    assert [t for _, t in log][-3:] == ["usage", "attempt_error", "done"]


async def test_a_retry_opens_the_next_attempt_with_reset(pool: asyncpg.Pool) -> None:
    job_id = await create(pool)
    first = await drive.claim(pool)
    await drive.tokens(pool, first, ["lost "])
    await drive.retry(pool, first)
    second = await drive.claim(pool)
    await drive.tokens(pool, second, ["kept"])
    await drive.succeed(pool, second, "kept")
    log = await types(pool, job_id)
    check_contract(log)
    assert (2, "reset") in log
    assert (await job_reads.snapshot(pool, "default", job_id)).text == "kept"


async def test_cancel_of_a_running_job(pool: asyncpg.Pool) -> None:
    job_id = await create(pool)
    held = await drive.claim(pool)
    await jobs.cancel(pool, "default", job_id, drive.CLOCK)
    await attempts.confirm_cancel(pool, held, USAGE, drive.CLOCK, provider_confirmed=True)
    log = await types(pool, job_id)
    check_contract(log)
    assert [t for _, t in log][-2:] == ["usage", "done"]


async def test_cancel_of_a_queued_job(pool: asyncpg.Pool) -> None:
    job_id = await create(pool)
    await jobs.cancel(pool, "default", job_id, drive.CLOCK)
    check_contract(await types(pool, job_id))


@pytest.mark.parametrize("cancelling", [False, True])
async def test_a_lost_attempt_ends_the_job_with_done(pool: asyncpg.Pool, cancelling: bool) -> None:
    spec = JobSpec(prompt="p", provider="simulated", max_attempts=1)
    job_id = (await creates.create(pool, "default", spec, None)).job.id
    clock = ManualClock()
    held = await claims.claim(pool, providers=["simulated"], worker_id="w", lease_s=1, clock=clock)
    assert held is not None
    if cancelling:
        await jobs.cancel(pool, "default", job_id, clock)
    clock.advance(5)
    assert await attempts.reap_expired(pool, clock) == 1
    log = await types(pool, job_id)
    check_contract(log)
