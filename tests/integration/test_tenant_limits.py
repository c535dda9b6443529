"""A tenant's running limit (tenants.max_running) holds exactly under racing claims, and a full
tenant does not hold back the others (docs/design.md, "Claim": fair across tenants)."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import asyncpg

from jobstream import claims, creates
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.jobspec import JobSpec

CLOCK = DatabaseClock()
CLAIMERS = 12  # the wide_pool fixture has a connection for each


async def race(pool: asyncpg.Pool) -> list[Claimed]:
    results = await asyncio.gather(
        *(
            claims.claim(pool, providers=["simulated"], worker_id=f"w{i}", lease_s=30, clock=CLOCK)
            for i in range(CLAIMERS)
        )
    )
    return [held for held in results if held is not None]


async def add_jobs(pool: asyncpg.Pool, tenant: str, count: int) -> None:
    for i in range(count):
        spec = JobSpec(prompt=f"{tenant} {i}", provider="simulated")
        await creates.create(pool, tenant, spec, str(uuid.uuid4()))


async def test_racing_claims_never_run_more_than_the_tenants_limit(
    wide_pool: asyncpg.Pool,
) -> None:
    await wide_pool.execute("UPDATE tenants SET max_running = 3 WHERE id = 'default'")
    await wide_pool.execute(
        "INSERT INTO tenants (id, name, max_running) VALUES ('other', 'Other', 100)"
    )
    await add_jobs(wide_pool, "default", 20)
    await add_jobs(wide_pool, "other", 5)
    won = await race(wide_pool)
    by_tenant = {t: sum(1 for h in won if h.tenant_id == t) for t in ("default", "other")}
    # However the twelve claims interleave: three for the full tenant, all five of the other.
    assert by_tenant == {"default": 3, "other": 5}
    running = await wide_pool.fetchval(
        "SELECT count(*) FROM jobs WHERE tenant_id = 'default' AND status = 'running'"
    )
    assert running == 3
    assert await race(wide_pool) == []  # nothing more until a slot frees


async def test_claims_and_creates_of_one_tenant_never_deadlock(wide_pool: asyncpg.Pool) -> None:
    # Regression: the claim locked the tenant FOR UPDATE, which conflicts with the FOR KEY SHARE
    # that inserting a job takes on its tenant; a create then waiting to reserve its budget and a
    # claim waiting on that create's insert deadlocked.
    await wide_pool.execute("UPDATE tenants SET max_running = 1000 WHERE id = 'default'")
    await add_jobs(wide_pool, "default", 6)
    for _ in range(3):
        making = [
            creates.create(
                wide_pool, "default", JobSpec(prompt="more", provider="simulated"),
                str(uuid.uuid4()), reserved_usd=Decimal("0.001"),
            )
            for _ in range(CLAIMERS // 2)
        ]  # fmt: skip
        claiming = [
            claims.claim(
                wide_pool, providers=["simulated"], worker_id=f"w{i}", lease_s=30, clock=CLOCK
            )
            for i in range(CLAIMERS // 2)
        ]
        results = await asyncio.gather(*making, *claiming, return_exceptions=True)
        assert not [r for r in results if isinstance(r, BaseException)]
