"""An attempt's row is written once, at its end (job_attempts in schema.sql): while it runs, the
attempt is its job's row, and every reader of attempts lists it from there with the start its
claim recorded; its end, a success, a failure or the reaper's `lost`, writes the one row."""

from __future__ import annotations

import asyncpg
import pytest

from jobstream import attempts, claims, job_reads
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.errors import Fenced
from jobstream.sql import queries
from jobstream.usage import Usage
from tests.support.clock import ManualClock
from tests.support.workers import create_job, manual_clock

LEASE_S = 30.0


async def claim_one(pool: asyncpg.Pool, clock: ManualClock, worker_id: str = "w1") -> Claimed:
    [held] = await claims.claim_batch(
        pool, providers=["simulated"], worker_id=worker_id, lease_s=LEASE_S, clock=clock,
        max_jobs=1,
    )  # fmt: skip
    return held


async def lost_attempt(pool: asyncpg.Pool, clock: ManualClock, *, max_attempts: int) -> Claimed:
    """A new job's attempt, claimed, whose lease then runs out and the reaper takes back."""
    await create_job(pool, max_attempts=max_attempts)
    held = await claim_one(pool, clock)
    clock.advance(LEASE_S + 1)
    assert await attempts.reap_expired(pool, clock) == 1
    return held


async def rows_of(pool: asyncpg.Pool, held: Claimed) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT attempt, outcome, worker_id, started_at, finished_at FROM job_attempts"
        " WHERE job_id = $1 ORDER BY attempt",
        held.job_id,
    )


async def test_a_running_attempt_is_listed_from_its_job_and_its_success_writes_its_row(
    pool: asyncpg.Pool,
) -> None:
    clock = manual_clock()
    await create_job(pool)
    held = await claim_one(pool, clock)
    # The claim's clock is the attempt's start, which the worker holds.
    assert held.started_at == clock.now()
    assert await rows_of(pool, held) == []
    [running] = await job_reads.attempts(pool, held.job_id)
    assert (running.attempt, running.outcome, running.worker_id) == (1, "running", "w1")
    assert running.started_at == held.started_at and running.finished_at is None
    under_way = await pool.fetch(queries.ADMIN_RUNNING_ATTEMPTS)
    assert [(r["job_id"], r["attempt"], r["worker_id"]) for r in under_way] == [
        (held.job_id, 1, "w1")
    ]

    clock.advance(2.5)
    usage = Usage(input_tokens=3, output_tokens=1)
    assert await attempts.accept_many(pool, [Success(held, "x", usage, "x")], clock) == {0}
    [row] = await rows_of(pool, held)
    assert (row["attempt"], row["outcome"], row["worker_id"]) == (1, "succeeded", "w1")
    assert (row["started_at"], row["finished_at"]) == (held.started_at, clock.now())
    [ended] = await job_reads.attempts(pool, held.job_id)
    assert (ended.outcome, ended.input_tokens) == ("succeeded", 3)
    assert await pool.fetch(queries.ADMIN_RUNNING_ATTEMPTS) == []


async def test_a_lost_attempt_gets_its_row_from_the_reaper_and_its_retry_one_of_its_own(
    pool: asyncpg.Pool,
) -> None:
    clock = manual_clock()
    lost = await lost_attempt(pool, clock, max_attempts=2)
    # The reaper knows no start but the one the attempt's log was opened with: the claim's.
    [row] = await rows_of(pool, lost)
    assert (row["outcome"], row["worker_id"]) == ("lost", "w1")
    assert (row["started_at"], row["finished_at"]) == (lost.started_at, clock.now())

    retry = await claim_one(pool, clock, worker_id="w2")
    assert (retry.job_id, retry.attempt) == (lost.job_id, 2)
    listed = await job_reads.attempts(pool, lost.job_id)
    assert [(a.attempt, a.outcome, a.worker_id) for a in listed] == [
        (1, "lost", "w1"),
        (2, "running", "w2"),
    ]
    error = {"class": "invalid_request", "message": "no"}
    await attempts.fail(
        pool, retry, action="fail", outcome="failed", error=error, usage=None, retry_in_s=0,
        clock=clock,
    )  # fmt: skip
    rows = await rows_of(pool, lost)
    assert [(r["attempt"], r["outcome"], r["worker_id"]) for r in rows] == [
        (1, "lost", "w1"),
        (2, "failed", "w2"),
    ]
    assert rows[1]["started_at"] == retry.started_at


async def test_an_attempt_that_lost_its_job_writes_no_row_when_it_fails(
    pool: asyncpg.Pool,
) -> None:
    # The reaper took the job back; the zombie's failure is refused whole, its row with it.
    clock = manual_clock()
    zombie = await lost_attempt(pool, clock, max_attempts=3)
    error = {"class": "server_error", "message": "late"}
    with pytest.raises(Fenced):
        await attempts.fail(
            pool, zombie, action="retry", outcome="failed", error=error, usage=None,
            retry_in_s=0, clock=clock,
        )  # fmt: skip
    assert [(r["attempt"], r["outcome"]) for r in await rows_of(pool, zombie)] == [(1, "lost")]
