"""The claim at scale (docs/design.md, "Claim"): batches, turns across tenants, delayed jobs,
and a cost that does not grow with the backlog."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

import asyncpg
import orjson

from jobstream import claims, creates, db
from jobstream.claims import Claimed
from jobstream.clock import Clock, DatabaseClock
from jobstream.jobspec import JobSpec
from jobstream.new_jobs import NewJob
from jobstream.sql import queries
from tests.support.clock import ManualClock
from tests.support.polling import eventually, lock_waits

CLOCK = DatabaseClock()


async def enqueue(
    pool: asyncpg.Pool, tenant: str, count: int, clock: Clock = CLOCK, **fields: object
) -> None:
    for start in range(0, count, 1000):
        items = [
            NewJob(JobSpec(prompt=f"{tenant} {i}", provider="simulated", **fields))  # type: ignore[arg-type]
            for i in range(start, min(count, start + 1000))
        ]
        await creates.create_many(pool, tenant, items, clock=clock)


async def claim(pool: asyncpg.Pool, n: int, clock: Clock = CLOCK, who: str = "w") -> list[Claimed]:
    return await claims.claim_batch(
        pool, providers=["simulated"], worker_id=who, lease_s=30, clock=clock, max_jobs=n
    )


async def add_tenant(pool: asyncpg.Pool, tenant: str, max_running: int = 1000) -> None:
    await pool.execute(
        "INSERT INTO tenants (id, name, max_running) VALUES ($1, $1, $2)", tenant, max_running
    )


async def test_a_batch_claims_a_tenants_jobs_by_priority_then_age(pool: asyncpg.Pool) -> None:
    await enqueue(pool, "default", 3)
    await enqueue(pool, "default", 1, priority=5)
    held = await claim(pool, 3)
    prompts = [h.spec.prompt for h in held]
    assert prompts == ["default 0", "default 0", "default 1"]  # the urgent one, then the oldest
    assert held[0].spec.prompt == "default 0"
    urgent = await pool.fetchval("SELECT id FROM jobs WHERE priority = 5")
    assert held[0].job_id == urgent
    assert len({h.run_token for h in held}) == 3
    # Each claimed job's log opens with its attempt, as for a single claim.
    for h in held:
        types = await pool.fetch(
            "SELECT type, data FROM job_log WHERE job_id = $1 ORDER BY seq", h.job_id
        )
        assert [r["type"] for r in types] == ["status", "reset", "status"]
        assert types[1]["data"] == {"attempt": 1, "reason": "first attempt"}


async def test_a_tenants_single_job_starts_in_the_first_round_beside_another_ones_10000(
    pool: asyncpg.Pool,
) -> None:
    await add_tenant(pool, "small")
    await pool.execute("UPDATE tenants SET max_running = 100000 WHERE id = 'default'")
    await enqueue(pool, "default", 10_000)
    await enqueue(pool, "small", 1)
    held = await claim(pool, 8)
    assert "small" in {h.tenant_id for h in held}
    assert len(held) == 8


async def test_single_slot_claims_take_turns_between_tenants(pool: asyncpg.Pool) -> None:
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 5)
    await enqueue(pool, "other", 5)
    order = []
    for _ in range(6):
        [held] = await claim(pool, 1)
        order.append(held.tenant_id)
        # Finished at once, so running counts never tell the tenants apart: turns must.
        await pool.execute("UPDATE jobs SET status = 'succeeded' WHERE id = $1", held.job_id)
    assert order.count("default") == order.count("other") == 3
    assert all(a != b for a, b in itertools.pairwise(order))


async def test_racing_batch_claims_keep_the_tenants_limit_exact(
    wide_pool: asyncpg.Pool,
) -> None:
    await wide_pool.execute("UPDATE tenants SET max_running = 5 WHERE id = 'default'")
    await add_tenant(wide_pool, "other", max_running=7)
    await enqueue(wide_pool, "default", 40)
    await enqueue(wide_pool, "other", 40)
    limits = {"default": 5, "other": 7}

    async def running() -> dict[str, int]:
        rows = await wide_pool.fetch(
            "SELECT tenant_id, count(*) FROM jobs WHERE status = 'running' GROUP BY 1"
        )
        return {r["tenant_id"]: r["count"] for r in rows}

    for _ in range(3):
        won = await asyncio.gather(*(claim(wide_pool, 4, who=f"w{i}") for i in range(8)))
        held = [h for batch in won for h in batch]
        assert len({h.job_id for h in held}) == len(held)
        assert all(n <= limits[tenant] for tenant, n in (await running()).items())
        # A slot lost in the race is claimed by the next round, never given away twice.
        await claim(wide_pool, 20)
        assert await running() == limits
        await wide_pool.execute("UPDATE jobs SET status = 'succeeded' WHERE status = 'running'")


async def test_a_claim_that_loses_the_race_for_a_tenants_last_slot_undoes_itself(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # Both claims see the tenant's one free slot; the second, counting again after the first
    # committed, is over the limit. It undoes its writes in claim_jobs' savepoint and names the
    # tenant in a row with no id, so no ERROR reaches PostgreSQL's log (an error of its own would
    # undo the claim as well, and be logged at every lost race).
    await pool.execute("UPDATE tenants SET max_running = 1 WHERE id = 'default'")
    await enqueue(pool, "default", 2)
    args: tuple[object, ...] = (["simulated"], "w", 30.0, None, [], [], [], 1, ["llm"], 0.75)
    first, second = [await db.connect(database_url) for _ in range(2)]
    try:
        ahead = first.transaction()
        await ahead.start()
        [won] = await first.fetch(queries.CLAIM_JOBS, *args)  # holds the tenant's row
        losing = asyncio.create_task(second.fetch(queries.CLAIM_JOBS, *args))

        await eventually(
            lambda: lock_waits(pool), lambda n: n == 1, what="the second claim waits for the tenant"
        )
        await ahead.commit()
        lost = await asyncio.wait_for(losing, 10)
    finally:
        await first.close()
        await second.close()
    assert [(row["id"], row["tenant_id"]) for row in lost] == [(None, "default")]
    assert won["id"] is not None
    rows = await pool.fetch("SELECT id, status, attempts FROM jobs ORDER BY status")
    assert [(r["status"], r["attempts"]) for r in rows] == [("queued", 0), ("running", 1)]
    # The undone claim left nothing of its attempt: no events opening its log.
    opened = "SELECT count(*) FROM job_events WHERE job_id = $1"
    assert [await pool.fetchval(opened, r["id"]) for r in rows] == [0, 1]
    # Its lost claim's job gets the slot once it frees.
    await pool.execute("UPDATE jobs SET status = 'succeeded' WHERE id = $1", won["id"])
    [held] = await claim(pool, 1)
    assert held.job_id != won["id"]


async def test_a_delayed_job_is_queued_and_not_claimed_before_its_time(
    pool: asyncpg.Pool,
) -> None:
    clock = ManualClock()
    await enqueue(pool, "default", 1, clock=clock, delay_s=60.0)
    await enqueue(pool, "default", 1, clock=clock, run_at=clock.now() + timedelta(seconds=120))
    assert await claim(pool, 8, clock) == []
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 2
    clock.advance(61)
    assert [h.spec.prompt for h in await claim(pool, 8, clock)] == ["default 0"]
    clock.advance(60)
    assert len(await claim(pool, 8, clock)) == 1


async def statement_pages(pool: asyncpg.Pool, statement: str, *args: object) -> tuple[int, int]:
    """Pages a statement touches and the rows it returns (EXPLAIN ANALYZE runs it; the
    transaction is undone)."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement
            plan = await conn.fetchval(explain, *args)
        finally:
            await tx.rollback()
    top = (orjson.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"], top["Actual Rows"]


async def claim_buffers(pool: asyncpg.Pool) -> int:
    """Pages one claim of 8 jobs touches."""
    args: tuple[object, ...] = (["simulated"], "w", 30.0, None, [], [], [], 8, ["llm"], 0.75)
    touched, rows = await statement_pages(pool, queries.CLAIM_JOBS, *args)
    assert rows == 8
    return touched


async def test_the_claim_reads_as_much_with_20000_jobs_queued_as_with_200(
    pool: asyncpg.Pool,
) -> None:
    # The old claim sorted every runnable job: its pages grew with the backlog. A delayed backlog
    # of higher priority must not be read either.
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 100)
    await enqueue(pool, "other", 100)
    await pool.execute("VACUUM ANALYZE jobs")
    small = await claim_buffers(pool)
    await enqueue(pool, "default", 10_000)
    await enqueue(pool, "other", 10_000)
    await enqueue(pool, "other", 2_000, priority=5, delay_s=3600.0)
    await pool.execute("VACUUM ANALYZE jobs")
    large = await claim_buffers(pool)
    assert large < 1.5 * small + 10, (small, large)


async def limited_claim_buffers(pool: asyncpg.Pool, limited: list[str]) -> int:
    """Pages a claim for providers with a limit touches (their probe, then the claim)."""
    limits = [16] * len(limited)
    args: tuple[object, ...] = ([], "w", 30.0, None, limited, limits, [], 8, ["llm"], 0.75)
    touched, _ = await statement_pages(pool, queries.CLAIM_JOBS, *args)
    return touched


async def test_a_limited_providers_probe_reads_as_much_with_20000_jobs_queued_as_with_200(
    pool: asyncpg.Pool,
) -> None:
    # Regression: a worker with a limited provider (openai, 16 by default) probed for its
    # runnable jobs with an EXISTS that the planner ran as a join filter over every queued
    # job of every provider: 10.8 ms a claim at 80,000 queued simulated jobs.
    await enqueue(pool, "default", 200)
    await pool.execute("VACUUM ANALYZE jobs")
    small = await limited_claim_buffers(pool, ["openai"])
    await enqueue(pool, "default", 20_000)
    await pool.execute("VACUUM ANALYZE jobs")
    large = await limited_claim_buffers(pool, ["openai"])
    assert large < 1.5 * small + 10, (small, large)
    # The probe locks (upserts) the row of a provider with runnable work, and only that one.
    assert await pool.fetchval("SELECT count(*) FROM provider_state") == 0
    args: tuple[object, ...] = (
        [],
        "w",
        30.0,
        None,
        ["openai", "simulated"],
        [16, 16],
        [],
        8,
        ["llm"],
        0.75,
    )
    claimed = await pool.fetch(queries.CLAIM_JOBS, *args)
    assert [row["provider"] for row in claimed] == ["simulated"] * 8
    assert await pool.fetchval("SELECT array_agg(provider) FROM provider_state") == ["simulated"]


async def test_a_claim_passes_over_a_queue_whose_jobs_claims_in_flight_hold(
    wide_pool: asyncpg.Pool,
) -> None:
    # Regression: a claim of one job looked at one queue only; when another claim in flight
    # held that queue's rows (to roll back later, its tenant being full), this claim found
    # nothing though the other tenant had work, and a racing round left slots empty.
    await add_tenant(wide_pool, "other")
    await enqueue(wide_pool, "default", 2)
    await enqueue(wide_pool, "other", 1)
    async with wide_pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT id FROM jobs WHERE tenant_id = 'default' FOR UPDATE"
        )  # a claim in flight
        [held] = await claim(wide_pool, 1)
    assert held.tenant_id == "other"


async def test_two_claims_taking_turns_behind_a_third_never_deadlock(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # Regression (claim_jobs' step 3, schema.sql): a claim commits a new version of the tenant's
    # row while two more wait for it, and a ledger booking's foreign key check holds FOR KEY
    # SHARE on it. The second waiter took the old version's tuple lock, then waited for the
    # first, which waited for that tuple lock: one of them failed with a deadlock (every time,
    # here, when the lock and the turn were one statement).
    await enqueue(pool, "default", 2)
    sharer, writer, first, second = [await db.connect(database_url) for _ in range(4)]
    try:
        shared = sharer.transaction()
        await shared.start()
        await sharer.execute("SELECT FROM tenants WHERE id = 'default' FOR KEY SHARE")
        ahead = writer.transaction()
        await ahead.start()
        await writer.execute("UPDATE tenants SET last_claimed_at = now() WHERE id = 'default'")

        async def take_turn(conn: asyncpg.Connection) -> int:
            args: tuple[object, ...] = (
                ["simulated"], "w", 30.0, None, [], [], [], 1, ["llm"], 0.75,
            )  # fmt: skip
            return len(await conn.fetch(queries.CLAIM_JOBS, *args))

        turns = [asyncio.create_task(take_turn(first))]
        await eventually(lambda: lock_waits(pool), lambda n: n == 1, what="the first claim waits")
        turns.append(asyncio.create_task(take_turn(second)))
        await eventually(lambda: lock_waits(pool), lambda n: n == 2, what="the second claim waits")
        await ahead.commit()
        assert await asyncio.wait_for(asyncio.gather(*turns), 10) == [1, 1]
        await shared.commit()
    finally:
        for conn in (sharer, writer, first, second):
            await conn.close()
