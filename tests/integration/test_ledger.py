"""Money (docs/design.md, "Money: the ledger"): reserve at create, charge once on success,
release otherwise."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, creates, jobs, new_jobs
from jobstream.attempts import Success
from jobstream.clock import DatabaseClock
from jobstream.errors import BudgetExceeded
from jobstream.jobspec import JobSpec
from jobstream.usage import Usage
from tests.support.ledger_rows import one_connection_pool

CLOCK = DatabaseClock()


def spec(prompt: str = "p") -> JobSpec:
    return JobSpec(prompt=prompt, provider="simulated")


async def tenant_money(pool: asyncpg.Pool) -> tuple[Decimal, Decimal]:
    row = await pool.fetchrow(
        "SELECT reserved_usd, spent_usd FROM tenant_balances WHERE tenant_id = 'default'"
    )
    assert row is not None
    return row["reserved_usd"], row["spent_usd"]


async def test_budget_refuses_what_it_cannot_cover_even_under_concurrency(
    pool: asyncpg.Pool,
) -> None:
    await pool.execute("UPDATE tenants SET budget_usd = 1 WHERE id = 'default'")
    outcomes = await asyncio.gather(
        *(creates.create(pool, "default", spec(f"p{i}"), None, reserved_usd=Decimal("0.3"))
          for i in range(10)),
        return_exceptions=True,
    )  # fmt: skip
    made = [o for o in outcomes if isinstance(o, new_jobs.Created)]
    refused = [o for o in outcomes if isinstance(o, BudgetExceeded)]
    assert (len(made), len(refused)) == (3, 7)
    assert await tenant_money(pool) == (Decimal("0.9"), Decimal(0))
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 3


async def test_success_charges_the_accepted_price_once_and_frees_the_reservation(
    pool: asyncpg.Pool,
) -> None:
    await creates.create(pool, "default", spec(), None, reserved_usd=Decimal("0.5"))
    held = await claims.claim(pool, providers=["simulated"], worker_id="w", lease_s=30, clock=CLOCK)
    assert held is not None
    await attempts.accept(pool, Success(held, "text", Usage(3, 4, Decimal("0.2"))), CLOCK)
    assert await tenant_money(pool) == (Decimal(0), Decimal("0.2"))
    charged = await pool.fetchval("SELECT charged_usd FROM jobs WHERE id = $1", held.job_id)
    assert charged == Decimal("0.2")


@pytest.mark.parametrize("end", ["cancel_queued", "permanent_failure", "cancel_running"])
async def test_every_other_end_releases_the_reservation(pool: asyncpg.Pool, end: str) -> None:
    created = await creates.create(pool, "default", spec(), None, reserved_usd=Decimal("0.5"))
    job_id = created.job.id
    assert await tenant_money(pool) == (Decimal("0.5"), Decimal(0))
    if end == "cancel_queued":
        await jobs.cancel(pool, "default", job_id, CLOCK)
    else:
        held = await claims.claim(
            pool, providers=["simulated"], worker_id="w", lease_s=30, clock=CLOCK
        )
        assert held is not None
        if end == "permanent_failure":
            await attempts.fail(
                pool, held, action="fail", outcome="failed",
                error={"class": "permanent", "message": "400"}, usage=None, retry_in_s=0,
                clock=CLOCK,
            )  # fmt: skip
        else:
            await jobs.cancel(pool, "default", job_id, CLOCK)
            await attempts.confirm_cancel(pool, held, None, CLOCK, provider_confirmed=True)
    assert await tenant_money(pool) == (Decimal(0), Decimal(0))


async def test_a_success_does_not_wait_for_another_connections_booking(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # Regression: bookings went to the job's shard, so a success of 64 jobs wrote about all 16
    # rows of the tenant and waited for every other writer's commit (ledger.sql). Now each
    # connection writes its own row: while another holds its row, a success still commits.
    await pool.execute("UPDATE tenants SET max_running = 64 WHERE id = 'default'")
    items = [new_jobs.NewJob(spec(f"p{i}"), None, Decimal("0.5")) for i in range(64)]
    made = await creates.create_many(pool, "default", items)
    assert all(isinstance(m, new_jobs.Created) for m in made)
    held = await claims.claim_batch(
        pool, providers=["simulated"], worker_id="w", lease_s=30, clock=CLOCK, max_jobs=64
    )
    assert len(held) == 64
    other = await asyncpg.connect(database_url)
    try:
        async with other.transaction():
            # Its row locked until commit, as a create's or a success's booking holds it.
            shard = await other.fetchval(
                "INSERT INTO tenant_ledger AS l (tenant_id, shard) VALUES ('default',"
                " pg_backend_pid() % 16) ON CONFLICT (tenant_id, shard) DO UPDATE"
                " SET spent_usd = l.spent_usd RETURNING shard"
            )
            single = await one_connection_pool(database_url, row=lambda r: r != shard)
            try:
                successes = [Success(h, "t", Usage(1, 1, Decimal("0.25"))) for h in held]
                landed = await asyncio.wait_for(attempts.accept_many(single, successes, CLOCK), 10)
            finally:
                await single.close()
            assert len(landed) == 64
    finally:
        await other.close()
    # The reservations were booked on one connection's row and released on another's.
    assert await tenant_money(pool) == (Decimal(0), Decimal("16.00"))
    assert await pool.fetchval("SELECT min(reserved_usd) FROM tenant_ledger") < 0
