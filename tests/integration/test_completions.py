"""A worker's successes written together (worker/completions.py): one statement for many
attempts, each fenced on its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, creates
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.errors import Fenced
from jobstream.jobspec import JobSpec
from jobstream.usage import Usage
from jobstream.worker.completions import Completions
from tests.support.polling import eventually

CLOCK = DatabaseClock()
USAGE = Usage(2, 3, Decimal("0.001"))


@pytest.fixture
async def completions(pool: asyncpg.Pool) -> AsyncIterator[Completions]:
    writer = Completions(pool, CLOCK)
    task = asyncio.create_task(writer.run(), name="completions-under-test")
    yield writer
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def running(pool: asyncpg.Pool, count: int) -> list[Claimed]:
    for i in range(count):
        await creates.create(pool, "default", JobSpec(prompt=f"p{i}", provider="simulated"), None)
    return await claims.claim_batch(
        pool, providers=["simulated"], worker_id="w", lease_s=30, clock=CLOCK, max_jobs=count
    )


async def test_one_fenced_out_attempt_leaves_the_others_successes_whole(
    pool: asyncpg.Pool, completions: Completions
) -> None:
    held = await running(pool, 4)
    stale = held[1]
    # Another attempt owns this job now (as after a lease expiry and a new claim).
    await pool.execute("UPDATE jobs SET run_token = gen_random_uuid() WHERE id = $1", stale.job_id)
    outcomes = await asyncio.gather(
        *(completions.accept(Success(h, f"text {i}", USAGE, last_chunk="tail")) for i, h in
          enumerate(held)),
        return_exceptions=True,
    )  # fmt: skip
    assert isinstance(outcomes[1], Fenced)
    assert [o for i, o in enumerate(outcomes) if i != 1] == [None, None, None]
    for i, h in enumerate(held):
        job = await pool.fetchrow(
            "SELECT status, result, last_seq FROM jobs WHERE id = $1", h.job_id
        )
        assert job is not None
        if h is stale:
            assert job["status"] == "running" and job["result"] is None
            continue
        assert job["status"] == "succeeded" and job["result"]["text"] == f"text {i}"
        log = await pool.fetch(
            "SELECT seq, type, data FROM job_log WHERE job_id = $1 ORDER BY seq", h.job_id
        )
        # Gap-free, and the last chunk, usage and done in that order at the end.
        assert [r["seq"] for r in log] == list(range(1, job["last_seq"] + 1))
        assert [r["type"] for r in log[-3:]] == ["token", "usage", "done"]
        assert log[-3]["data"] == {"text": "tail"}
    money = await pool.fetchrow("SELECT reserved_usd, spent_usd FROM tenant_balances")
    assert money is not None and money["spent_usd"] == Decimal("0.003")
    outcomes_of_attempts = await pool.fetch(
        "SELECT outcome, count(*) FROM job_attempts GROUP BY 1 ORDER BY 1"
    )
    # The fenced-out attempt still runs: it has no row until it ends (job_attempts, schema.sql).
    assert [tuple(r) for r in outcomes_of_attempts] == [("succeeded", 3)]


async def test_a_success_the_database_refuses_fails_alone(
    pool: asyncpg.Pool, completions: Completions
) -> None:
    held = await running(pool, 3)
    # jsonb refuses U+0000: that one statement fails, and the other two must still land.
    texts = ["fine", "bad \x00", "also fine"]
    outcomes = await asyncio.gather(
        *(completions.accept(Success(h, t, USAGE)) for h, t in zip(held, texts, strict=True)),
        return_exceptions=True,
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], asyncpg.PostgresError)
    statuses = [
        await pool.fetchval("SELECT status FROM jobs WHERE id = $1", h.job_id) for h in held
    ]
    assert statuses == ["succeeded", "running", "succeeded"]


async def test_claims_and_successes_notify_once_per_hundred_jobs(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # "id:seq,id:seq,..." as a token write sends: a NOTIFY a job was a sixth of a statement's
    # time; a payload holds at most 8,000 bytes, so a hundred jobs a notification.
    await pool.execute("UPDATE tenants SET max_running = 150 WHERE id = 'default'")
    heard: list[str] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("jobstream_events", lambda *args: heard.append(args[3]))
        held = await running(pool, 150)
        assert len(held) == 150
        seqs = await _last_seqs(pool, [h.job_id for h in held])
        await eventually(lambda: _copy(heard), lambda got: len(got) >= 2, what="the claim's")
        claimed, heard[:] = list(heard), []
        await attempts.accept_many(pool, [Success(h, "done", USAGE) for h in held], CLOCK)
        await eventually(lambda: _copy(heard), lambda got: len(got) >= 2, what="the success's")
        succeeded = list(heard)
    finally:
        await listener.close()
    ended = await _last_seqs(pool, list(seqs))
    for notices, expected in ((claimed, seqs), (succeeded, ended)):
        assert sorted(len(n.split(",")) for n in notices) == [50, 100]
        named = dict(item.split(":") for n in notices for item in n.split(","))
        assert named == {str(job): str(seq) for job, seq in expected.items()}


async def _last_seqs(pool: asyncpg.Pool, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    rows = await pool.fetch("SELECT id, last_seq FROM jobs WHERE id = ANY($1)", job_ids)
    return {row["id"]: row["last_seq"] for row in rows}


async def _copy(values: list[str]) -> list[str]:
    return list(values)
