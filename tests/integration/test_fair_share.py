"""A tenant without a running limit of its own gets a fair share of the fleet's slots, never all
of them while another tenant could want one (claim_jobs' `fair`, schema.sql); the workers
announce the slots in their `workers` rows (jobstream/workers.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from jobstream import claims, creates, tenants
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.worker.janitor import Janitor
from tests.integration.test_claims import enqueue
from tests.support.gated_provider import GatedProvider
from tests.support.polling import eventually, signalled
from tests.support.workers import manual_clock, running_worker

CLOCK = DatabaseClock()
LEASE_S = 30.0


async def add_worker(
    pool: asyncpg.Pool,
    worker_id: str,
    slots: int,
    *,
    heartbeat_age_s: float = 0.0,
    stopped: bool = False,
) -> None:
    """A `workers` row as a worker process writes it (jobstream/workers.py)."""
    await pool.execute(
        "INSERT INTO workers (id, host, pid, version, job_names, slots, started_at, heartbeat_at,"
        " stopped_at)"
        " VALUES ($1, 'host', 1, '0.1.0', '{llm}', $2, now() - interval '1 hour',"
        "         now() - make_interval(secs => $3), CASE WHEN $4 THEN now() END)",
        worker_id,
        slots,
        heartbeat_age_s,
        stopped,
    )


async def a_fleet_of_8(pool: asyncpg.Pool) -> None:
    """Two live workers of 4 slots; a stopped one and a silent one (no heartbeat for longer
    than a lease) count for nothing."""
    await add_worker(pool, "a", 4)
    await add_worker(pool, "b", 4)
    await add_worker(pool, "stopped", 8, stopped=True)
    await add_worker(pool, "silent", 8, heartbeat_age_s=LEASE_S + 1)


async def add_tenant(pool: asyncpg.Pool, tenant: str) -> None:
    await pool.execute("INSERT INTO tenants (id, name) VALUES ($1, $1)", tenant)  # no limit


async def claim(pool: asyncpg.Pool, n: int, *, max_share: float = 0.75) -> list[Claimed]:
    return await claims.claim_batch(
        pool,
        providers=["simulated"],
        worker_id="w",
        lease_s=LEASE_S,
        clock=CLOCK,
        max_jobs=n,
        max_share=max_share,
    )


def by_tenant(held: list[Claimed]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for h in held:
        counts[h.tenant_id] = counts.get(h.tenant_id, 0) + 1
    return counts


async def test_a_tenant_alone_takes_three_quarters_of_the_fleet(pool: asyncpg.Pool) -> None:
    # fleet 8, one tenant with jobs: min(floor(8 * 0.75), ceil(8 / 1)) = 6.
    await a_fleet_of_8(pool)
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 20)
    assert by_tenant(await claim(pool, 8)) == {"default": 6}
    assert await claim(pool, 8) == []  # at its limit: the two slots wait for another tenant


async def test_two_tenants_split_the_fleet(pool: asyncpg.Pool) -> None:
    # fleet 8, two tenants with jobs: min(6, ceil(8 / 2)) = 4 each.
    await a_fleet_of_8(pool)
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 20)
    await enqueue(pool, "other", 20)
    assert by_tenant(await claim(pool, 8)) == {"default": 4, "other": 4}
    assert await claim(pool, 8) == []


async def test_a_tenant_with_only_running_jobs_counts_as_active(pool: asyncpg.Pool) -> None:
    await a_fleet_of_8(pool)
    await add_tenant(pool, "other")
    await enqueue(pool, "other", 1)
    assert by_tenant(await claim(pool, 8)) == {"other": 1}  # none queued now, one running
    await enqueue(pool, "default", 20)
    assert by_tenant(await claim(pool, 8)) == {"default": 4}


async def test_a_lone_tenant_has_no_limit(pool: asyncpg.Pool) -> None:
    # `make run` and keys off: every request is `default`'s, and no slot is kept for a tenant
    # that cannot exist, not even one the workers' rows leave out.
    await a_fleet_of_8(pool)
    await enqueue(pool, "default", 20)
    assert by_tenant(await claim(pool, 8)) == {"default": 8}
    assert by_tenant(await claim(pool, 4)) == {"default": 4}


async def test_the_fleet_is_never_less_than_the_claiming_workers_slots(
    pool: asyncpg.Pool,
) -> None:
    # No `workers` row (a claim called directly): the claim's own max_jobs is the fleet.
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 20)
    assert by_tenant(await claim(pool, 4)) == {"default": 3}  # min(floor(4 * 0.75), 4)


async def test_a_tenant_made_without_a_limit_keeps_none(pool: asyncpg.Pool) -> None:
    await tenants.create(pool, "acme")  # `python -m jobstream.tenants create acme`
    assert await pool.fetchval("SELECT max_running FROM tenants WHERE id = 'acme'") is None


async def test_the_share_is_a_setting_and_an_own_limit_is_kept(pool: asyncpg.Pool) -> None:
    await a_fleet_of_8(pool)
    await add_tenant(pool, "other")
    await enqueue(pool, "default", 20)
    assert by_tenant(await claim(pool, 8, max_share=1.0)) == {"default": 8}
    await pool.execute("UPDATE jobs SET status = 'succeeded' WHERE status = 'running'")
    # A tenant's own max_running is its limit, above its fair share or below it.
    await pool.execute("UPDATE tenants SET max_running = 7 WHERE id = 'default'")
    assert by_tenant(await claim(pool, 8)) == {"default": 7}


async def test_another_tenants_job_is_claimed_by_the_first_claim_after_it_is_queued(
    pool: asyncpg.Pool,
) -> None:
    # The regression, as the claims see it: a worker of 4 slots, tenant A's ten long jobs, then
    # B's one. A holds 3 (min(floor(4 * 0.75), 4)), so the fourth slot is B's at once.
    await add_worker(pool, "w", 4)
    await add_tenant(pool, "b")
    await enqueue(pool, "default", 10)
    assert by_tenant(await claim(pool, 4)) == {"default": 3}
    assert await claim(pool, 1) == []
    await enqueue(pool, "b", 1)
    assert by_tenant(await claim(pool, 1)) == {"b": 1}


async def test_racing_claims_hold_the_fair_limit_exactly(wide_pool: asyncpg.Pool) -> None:
    # Twelve claims of one job each can all see room in their snapshots: the recount under the
    # tenant's row lock (claim_jobs' step 3) holds the tenant to its fair limit, 6.
    await a_fleet_of_8(wide_pool)
    await add_tenant(wide_pool, "other")
    await enqueue(wide_pool, "default", 20)
    won = await asyncio.gather(*(claim(wide_pool, 1) for _ in range(12)))
    assert sum(len(batch) for batch in won) == 6
    running = await wide_pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'running'")
    assert running == 6


async def running_of(pool: asyncpg.Pool, tenant: str) -> int:
    n: int = await pool.fetchval(
        "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND status = 'running'", tenant
    )
    return n


async def test_one_tenants_long_jobs_leave_a_slot_for_another_tenant(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    # Regression: the default running limit was a fixed 16, above a worker's slots, so tenant
    # A's long jobs took all four slots of a worker and B's one-token job waited for one to end.
    await add_tenant(pool, "b")
    long_jobs = GatedProvider(before=1)  # every attempt streams a token, then waits
    four_slots = settings.replace(worker_concurrency=4)
    async with running_worker(four_slots, pool=pool, providers={"simulated": long_jobs}) as worker:
        for i in range(10):
            spec = JobSpec(prompt=f"long {i}", provider="simulated")
            await creates.create(pool, "default", spec, str(uuid.uuid4()))
        await eventually(lambda: running_of(pool, "default"), lambda n: n == 3, what="A runs 3")
        await signalled(long_jobs.waiting.wait(), what="A's attempts stream")
        spec = JobSpec(prompt="short", provider="simulated")
        created = await creates.create(pool, "b", spec, str(uuid.uuid4()))
        await eventually(
            lambda: pool.fetchval("SELECT status FROM jobs WHERE id = $1", created.job.id),
            lambda status: status == "running",
            what="B's job runs beside A's",
        )
        # A's jobs are all still running (the gate is shut): A held 3 of the 4 slots.
        assert await running_of(pool, "default") == 3

        async def attempts() -> int:
            return worker.running_count

        await eventually(attempts, lambda n: n == 4, what="the worker runs B's attempt")
        long_jobs.gate.set()


async def workers_row(pool: asyncpg.Pool, worker_id: str) -> dict[str, object]:
    row = await pool.fetchrow("SELECT * FROM workers WHERE id = $1", worker_id)
    assert row is not None, f"no workers row for {worker_id}"
    return dict(row)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
async def test_a_worker_announces_itself_keeps_its_heartbeat_and_says_when_it_stopped(
    pool: asyncpg.Pool, settings: Settings, busy: bool
) -> None:
    clock = manual_clock()
    started = clock.now()
    provider = GatedProvider(before=1)
    settings = settings.replace(lease_s=3.0, worker_concurrency=5)  # a tick every second
    options = {"pool": pool, "clock": clock, "providers": {"simulated": provider}}
    async with running_worker(settings, **options) as worker:
        row = await workers_row(pool, worker.worker_id)
        assert row["job_names"] == worker.job_names == ["llm"]
        assert (row["slots"], row["version"], row["stopped_at"]) == (5, "0.1.0", None)
        assert (row["host"], row["pid"]) == (worker.process.host, worker.process.pid)
        assert row["started_at"] == row["heartbeat_at"] == started
        if busy:
            # While it holds a lease, its renewals (RENEW_LEASES) carry the heartbeat.
            spec = JobSpec(prompt="hold", provider="simulated")
            await creates.create(pool, "default", spec, str(uuid.uuid4()))
            await signalled(provider.waiting.wait(), what="the attempt streams")
        # Less than a lease, so that the lease a busy worker holds does not run out meanwhile.
        now = clock.advance(2.0)

        async def heartbeat() -> object:
            return (await workers_row(pool, worker.worker_id))["heartbeat_at"]

        await eventually(heartbeat, lambda at: at == now, what="the heartbeat is refreshed")
        if busy:
            lease_until = await pool.fetchval("SELECT lease_until FROM jobs")
            assert lease_until == now + timedelta(seconds=3.0)  # by the same statement
        provider.gate.set()
    row = await workers_row(pool, worker.worker_id)
    assert row["stopped_at"] == now and row["started_at"] == started


async def test_a_stopped_workers_slots_leave_the_fleet(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    await add_tenant(pool, "other")
    async with running_worker(settings.replace(worker_concurrency=8), pool=pool):
        live = await pool.fetchval(
            "SELECT sum(slots) FROM workers WHERE stopped_at IS NULL AND heartbeat_at > $1",
            datetime.now(UTC) - timedelta(seconds=LEASE_S),
        )
        assert live == 8
    await enqueue(pool, "default", 20)
    # Its row is stopped: the fleet is this claim's own 4 slots, of which a tenant gets 3.
    assert by_tenant(await claim(pool, 4)) == {"default": 3}


async def test_a_worker_whose_row_was_deleted_writes_it_again(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    async with running_worker(settings.replace(lease_s=3.0), pool=pool, clock=clock) as worker:
        await pool.execute("DELETE FROM workers")
        now = clock.advance(1.0)

        async def row() -> object:
            return await pool.fetchrow("SELECT * FROM workers WHERE id = $1", worker.worker_id)

        found = await eventually(row, lambda r: r is not None, what="the idle tick writes it")
        assert isinstance(found, asyncpg.Record) and found["heartbeat_at"] == now


async def test_the_janitor_forgets_workers_stopped_or_silent_for_a_day(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    await add_worker(pool, "alive", 4)
    await add_worker(pool, "stopped-long-ago", 4, heartbeat_age_s=90_000, stopped=True)
    await pool.execute(
        "UPDATE workers SET stopped_at = now() - interval '25 hours' WHERE id = 'stopped-long-ago'"
    )
    await add_worker(pool, "stopped-recently", 4, heartbeat_age_s=600, stopped=True)
    await add_worker(pool, "killed-long-ago", 4, heartbeat_age_s=90_000)
    await add_worker(pool, "killed-recently", 4, heartbeat_age_s=600)
    done = await Janitor(pool, settings.replace(compact_after_s=0)).run_round()
    assert done is not None and done.workers_pruned == 2
    kept = {r["id"] for r in await pool.fetch("SELECT id FROM workers")}
    assert kept == {"alive", "killed-recently", "stopped-recently"}
