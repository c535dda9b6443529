"""The provider-wide concurrency limit, enforced by the claim in PostgreSQL (docs/design.md,
"Claim").

Claims race on separate connections, as claims of separate worker processes do: the limit must
hold exactly, not only on average.
"""

from __future__ import annotations

import asyncio
import random
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, db, migrations
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.sql import queries
from jobstream.usage import Usage
from tests.support.polling import eventually
from tests.support.workers import create_job

CLOCK = DatabaseClock()
LIMIT = 3
CLAIMERS = 12  # the wide_pool fixture has a connection for each


async def claim(
    pool: asyncpg.Pool, providers: list[str], worker: str, limited: str = "openai"
) -> Claimed | None:
    return await claims.claim(
        pool,
        providers=providers,
        worker_id=worker,
        lease_s=30,
        clock=CLOCK,
        limits={limited: LIMIT},
    )


async def race(pool: asyncpg.Pool, providers: list[str], limited: str = "openai") -> list[Claimed]:
    results = await asyncio.gather(
        *(claim(pool, providers, f"w{i}", limited) for i in range(CLAIMERS))
    )
    return [held for held in results if held is not None]


async def running_attempts(pool: asyncpg.Pool, provider: str) -> int:
    # A running attempt is its job's row (job_attempts, schema.sql).
    n: int = await pool.fetchval(
        "SELECT count(*) FROM jobs WHERE status IN ('running', 'cancelling') AND provider = $1",
        provider,
    )
    return n


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_racing_claims_never_run_more_than_the_limit(
    wide_pool: asyncpg.Pool, provider: str
) -> None:
    for i in range(20):
        await create_job(wide_pool, prompt=f"job {i}", provider=provider)
    rng = random.Random(7)
    held: list[Claimed] = []
    claimed_total = 0
    for _ in range(6):
        won = await race(wide_pool, [provider], provider)
        # Every free slot is taken, and not one more, however the claims interleave.
        assert len(won) == LIMIT - len(held)
        held += won
        claimed_total += len(won)
        assert await running_attempts(wide_pool, provider) == LIMIT
        # Finish some attempts, freeing their slots for the next race.
        for done in rng.sample(held, rng.randint(1, LIMIT)):
            await attempts.accept(wide_pool, Success(done, "text", Usage(1, 1, Decimal(0))), CLOCK)
            held.remove(done)
    queued = await wide_pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'")
    assert queued == 20 - claimed_total  # the rest wait their turn, queued


async def test_other_providers_are_not_held_back_by_a_full_one(wide_pool: asyncpg.Pool) -> None:
    for i in range(LIMIT + 2):
        await create_job(wide_pool, prompt=f"limited {i}", provider="openai")
    for i in range(5):
        await create_job(wide_pool, prompt=f"free {i}", provider="simulated")
    won = await race(wide_pool, ["openai", "simulated"])
    by_provider = [h.provider for h in won]
    assert by_provider.count("openai") == LIMIT
    assert by_provider.count("simulated") == 5  # no limit named: no limit
    assert await claim(wide_pool, ["openai", "simulated"], "late") is None


async def test_a_claim_with_nothing_runnable_locks_nothing(wide_pool: asyncpg.Pool) -> None:
    await create_job(wide_pool, prompt="free", provider="simulated")
    async with wide_pool.acquire() as conn, conn.transaction():
        # Another worker's claim is in progress for openai, holding its row...
        await conn.execute(
            "INSERT INTO provider_state (provider) VALUES ('openai')"
            " ON CONFLICT (provider) DO UPDATE SET paused_until = provider_state.paused_until"
        )
        # ...and a claim that finds no openai job does not wait for it.
        async with asyncio.timeout(5):
            held = await claim(wide_pool, ["openai", "simulated"], "w")
    assert held is not None and held.provider == "simulated"


async def test_schema_applies_while_a_claim_holds_a_provider_row(
    wide_pool: asyncpg.Pool, database_url: str
) -> None:
    # A process starting up applies the schema while running workers claim. The schema once
    # locked `jobs` (CREATE INDEX IF NOT EXISTS) and then provider_state (ALTER TABLE, at every
    # start), the opposite order to a claim: a deadlock, and a server that failed to start.
    await create_job(wide_pool, prompt="limited", provider="openai")
    applier = await db.connect(database_url)
    try:
        async with wide_pool.acquire() as claimer, claimer.transaction():
            # What a claim for a limited provider with runnable jobs locks first (claim_jobs,
            # schema.sql), held as a claim under way holds it.
            await claimer.execute(
                "INSERT INTO provider_state (provider) VALUES ('openai')"
                " ON CONFLICT (provider) DO UPDATE SET paused_until = provider_state.paused_until"
            )
            applying = asyncio.create_task(migrations.apply_schema(applier))
            pid = applier.get_server_pid()

            async def settled() -> bool:
                waiting = await wide_pool.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid
                )
                return applying.done() or waiting > 0

            await eventually(settled, bool, what="the schema is applied or waits for a lock")
            job = await claimer.fetchrow(
                queries.CLAIM_JOBS, [], "w", 30.0, None, ["openai"], [LIMIT], [], 1, ["llm"], 0.75
            )
        async with asyncio.timeout(10):
            await applying
    finally:
        await applier.close()
    assert job is not None
