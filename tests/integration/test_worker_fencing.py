"""Fencing (docs/design.md, "Fencing"): a stale attempt's writes change nothing, and the attempt
stops."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from decimal import Decimal

import asyncpg

from jobstream import attempts, claims, db, renewals, token_appends
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.errors import Fenced
from jobstream.settings import Settings
from jobstream.usage import Usage
from tests.support.clock import ManualClock
from tests.support.gated_provider import GatedProvider
from tests.support.ledger_rows import ledger_row, one_connection_pool
from tests.support.polling import eventually, signalled
from tests.support.workers import (
    attempt_rows,
    counted_text,
    create_job,
    event_list,
    fast,
    job_row,
    manual_clock,
    reassemble,
    running_worker,
    wait_for_status,
    wait_idle,
)

LEASE_S = 30.0


async def expire_and_reap(pool: asyncpg.Pool, clock: ManualClock) -> None:
    clock.advance(LEASE_S + 1)
    assert await attempts.reap_expired(pool, clock) == 1


async def claim(pool: asyncpg.Pool, clock: ManualClock, worker_id: str) -> Claimed:
    held = await claims.claim(
        pool, providers=["simulated"], worker_id=worker_id, lease_s=LEASE_S, clock=clock
    )
    assert held is not None
    return held


async def renew(pool: asyncpg.Pool, held: Claimed, clock: ManualClock) -> None:
    renewal = await renewals.renew_many(pool, [held], LEASE_S, clock, worker_id="test")
    if held.run_token not in renewal.renewed:
        raise Fenced("not renewed")


async def state(pool: asyncpg.Pool, job_id: uuid.UUID) -> tuple[object, ...]:
    return (
        await job_row(pool, job_id),
        await attempt_rows(pool, job_id),
        await event_list(pool, job_id),
    )


async def test_every_write_with_a_stale_run_token_changes_nothing(pool: asyncpg.Pool) -> None:
    clock = manual_clock()
    job_id = await create_job(pool, simulate=fast(5))
    stale = await claim(pool, clock, "first")
    await expire_and_reap(pool, clock)
    current = await claim(pool, clock, "second")
    assert current.attempt == 2 and current.run_token != stale.run_token
    before = await state(pool, job_id)
    usage = Usage(output_tokens=1, cost_usd=Decimal("0.01"))
    writes = {
        "renew": renew(pool, stale, clock),
        "append_tokens": token_appends.append_tokens(pool, stale, ["stale "], at=0),
        "succeed": attempts.accept(pool, Success(stale, "stale", usage), clock),
        "fail": attempts.fail(
            pool,
            stale,
            action="fail",
            outcome="failed",
            error={"class": "permanent", "message": "stale"},
            usage=usage,
            retry_in_s=0,
            clock=clock,
        ),
        "hand_back": attempts.hand_back(pool, stale, usage, clock),
        "confirm_cancel": attempts.confirm_cancel(
            pool, stale, usage, clock, provider_confirmed=True
        ),
    }
    refused = []
    for name, write in writes.items():
        try:
            await write
        except Fenced:
            refused.append(name)
    assert refused == list(writes)
    assert await state(pool, job_id) == before
    # The current attempt is unaffected and completes.
    await attempts.accept(pool, Success(current, "0 1 ", usage), clock)
    assert (await job_row(pool, job_id))["status"] == "succeeded"


async def test_one_renewal_renews_many_fences_the_stale_and_waits_for_none(
    pool: asyncpg.Pool,
) -> None:
    """The worker renews all its leases in one statement: each attempt gets its own answer."""
    clock = manual_clock()
    stale_job = await create_job(pool, simulate=fast(5))
    stale = await claim(pool, clock, "first")
    await expire_and_reap(pool, clock)
    current = await claim(pool, clock, "second")
    await create_job(pool, simulate=fast(5))
    await create_job(pool, simulate=fast(5))
    locked, free = await claim(pool, clock, "first"), await claim(pool, clock, "first")
    clock.advance(5)
    async with pool.acquire() as other, other.transaction():
        # Another write holds one job's row (a success batch, a cancel): the renewal must not
        # wait for it, nor take it for lost.
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", locked.job_id)
        async with asyncio.timeout(5):
            renewal = await renewals.renew_many(
                pool, [stale, current, locked, free], LEASE_S, clock, worker_id="first"
            )
    assert current.job_id == stale_job
    assert set(renewal.renewed) == {current.run_token, free.run_token}
    assert renewal.busy == {locked.run_token}
    for held in (current, free):
        lease_until = (await job_row(pool, held.job_id))["lease_until"]
        assert lease_until == clock.now() + timedelta(seconds=LEASE_S)


async def test_a_stale_worker_is_fenced_out_and_stops_its_attempt(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    settings = settings.replace(lease_s=LEASE_S)
    slow = GatedProvider(before=2, after=1, ends=False)
    job_id = await create_job(pool, simulate=fast(8))
    async with running_worker(
        settings.replace(worker_id="stale", worker_concurrency=1),
        pool=pool,
        clock=clock,
        providers={"simulated": slow},
    ) as stale_worker:
        await signalled(slow.waiting.wait(), what="the stale attempt streams")
        await eventually(
            lambda: event_list(pool, job_id),
            lambda log: reassemble(log) == "0 1 ",
            what="the stale attempt's first tokens are persisted",
        )
        # The stale worker's attempt stalls past its lease (its one slot still busy, so it
        # claims nothing else); the reaper moves on.
        await expire_and_reap(pool, clock)
        async with running_worker(
            settings.replace(worker_id="current"), pool=pool, clock=clock
        ) as current_worker:
            job = await wait_for_status(pool, job_id, "succeeded")
            await wait_idle(current_worker, what="the current worker is idle")
        reaped_at = max(e.seq for e in await event_list(pool, job_id) if e.attempt == 1)
        # The stale worker wakes up and writes its next tokens: refused, and it stops.
        slow.gate.set()
        await signalled(slow.cancelled.wait(), what="the stale stream is cancelled")
        await wait_idle(stale_worker, what="the stale worker is idle")
        assert stale_worker.results == {"fenced": 1}
        assert current_worker.results == {"succeeded": 1}
    log = await event_list(pool, job_id)
    assert max(e.seq for e in log if e.attempt == 1) == reaped_at  # nothing written after
    assert job["result"]["text"] == reassemble(log) == counted_text(8)
    first, second = await attempt_rows(pool, job_id)
    assert (first["worker_id"], first["outcome"]) == ("stale", "lost")
    assert (second["worker_id"], second["outcome"]) == ("current", "succeeded")
    assert await job_row(pool, job_id) == job


async def test_two_reapers_never_deadlock_on_the_ledger(database_url: str) -> None:
    # Regression: each reaper released its dead jobs' reservations in lease order, and batches
    # that met the same ledger rows in opposite orders deadlocked (10 of 10 with a batch of 2).
    # Here the two reapers' connections book on the same row of each tenant (ledger.sql), and
    # their batches meet the two tenants in opposite lease orders.
    pool = await db.create_pool(database_url, min_size=1, max_size=2)
    first = await one_connection_pool(database_url, row=lambda _: True)
    shared = await ledger_row(first)
    second = await one_connection_pool(database_url, row=lambda r: r == shared)
    clock = manual_clock()
    try:
        await pool.execute("INSERT INTO tenants (id, name) VALUES ('other', 'Other')")
        for _ in range(10):
            # lease order: the first reaper takes default then other, the second other then
            # default
            for i, tenant in enumerate(["default", "other", "other", "default"]):
                await pool.execute(
                    "INSERT INTO jobs (id, tenant_id, request_hash, provider, payload,"
                    " max_attempts, status, attempts, run_token, lease_until, reserved_usd,"
                    " estimate_usd, worker_id) VALUES (gen_random_uuid(), $1, 'h', 'simulated',"
                    " '{}', 1, 'running', 1, gen_random_uuid(), $2, 0.01, 0.01, 'w')",
                    tenant, clock.now() - timedelta(seconds=100 - i),
                )  # fmt: skip
                await pool.execute(
                    "INSERT INTO tenant_ledger (tenant_id, shard, reserved_usd) VALUES"
                    " ($1, 0, 0.01) ON CONFLICT (tenant_id, shard) DO UPDATE"
                    " SET reserved_usd = tenant_ledger.reserved_usd + 0.01",
                    tenant,
                )
            reaped = await asyncio.gather(
                attempts.reap_expired(first, clock, batch=2),
                attempts.reap_expired(second, clock, batch=2),
            )
            assert sum(reaped) == 4
        assert await pool.fetchval("SELECT sum(reserved_usd) FROM tenant_ledger") == 0
    finally:
        for each in (pool, first, second):
            await each.close()
