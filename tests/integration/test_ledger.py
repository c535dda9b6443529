"""Money (DESIGN.md §4.7): reserve at create, charge once on success, release otherwise."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, creates, jobs
from jobstream.attempts import Success
from jobstream.clock import DatabaseClock
from jobstream.errors import BudgetExceeded
from jobstream.jobspec import JobSpec
from jobstream.usage import Usage

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
    made = [o for o in outcomes if isinstance(o, creates.Created)]
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
