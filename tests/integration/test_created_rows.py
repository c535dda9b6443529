"""A create answers with its job as the database holds it, though INSERT_JOBS returns only what
the database set (JobRow.inserted builds the rest from what the insert wrote)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg

from jobstream import creates, job_reads, new_jobs
from jobstream.jobspec import JobSpec

# Every field a create can set, each away from its default.
FULL = JobSpec(
    prompt="user: hi",
    provider="simulated",
    model="sim-large",
    max_tokens=7,
    priority=-3,
    max_attempts=5,
    retry_unknown=True,
    timeout_s=42.5,
    webhook_url="https://hooks.example.com/jobs",
    metadata={"team": "search", "tags": ["a", "b"], "n": 3},
    simulate={"tokens": 2, "pattern": "count"},
    messages=[{"role": "user", "content": "hi"}],
    instructions="Be brief.",
    temperature=0.25,
    top_p=0.5,
    retain_s=600,
)


async def _stored(pool: asyncpg.Pool, created: new_jobs.Created) -> dict[str, object]:
    async with pool.acquire() as conn:
        return dataclasses.asdict(await job_reads.get(conn, "default", created.job.id))


async def test_a_created_job_is_the_row_the_database_holds(pool: asyncpg.Pool) -> None:
    # A reservation with more digits than numeric(18, 8) keeps: the answer is the stored one.
    outcomes = await creates.create_many(
        pool,
        "default",
        [
            new_jobs.NewJob(FULL, "full-key", Decimal("0.123456789")),
            new_jobs.NewJob(dataclasses.replace(FULL, webhook_url=None, delay_s=30.0)),
            new_jobs.NewJob(JobSpec(prompt="plain", provider="simulated")),
        ],
    )
    assert all(isinstance(o, new_jobs.Created) and o.created for o in outcomes)
    for outcome in outcomes:
        assert isinstance(outcome, new_jobs.Created)
        assert dataclasses.asdict(outcome.job) == await _stored(pool, outcome)
    full, delayed, _ = outcomes
    assert isinstance(full, new_jobs.Created) and isinstance(delayed, new_jobs.Created)
    assert delayed.job.run_after - delayed.job.created_at == timedelta(seconds=30)
    assert full.job.reserved_usd == Decimal("0.12345679")
    # Only a keyed job's body is digested: nothing compares an unkeyed one's.
    assert full.job.request_hash == FULL.request_hash() and delayed.job.request_hash == ""


async def test_a_job_to_run_at_a_time_answers_that_time(pool: asyncpg.Pool) -> None:
    at = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC) + timedelta(microseconds=5)
    created = await creates.create(
        pool, "default", JobSpec(prompt="later", provider="simulated", run_at=at), "run-at"
    )
    assert created.job.run_after == at
    assert dataclasses.asdict(created.job) == await _stored(pool, created)
