"""The server's single creates, written together (server/create_writer.py): every request still
gets the answer a create of its own would have had."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import asyncpg
import pytest

from jobstream import creates, job_reads, new_jobs
from jobstream.errors import IdempotencyConflict
from jobstream.jobspec import JobSpec
from jobstream.server.create_writer import CreateWriter

SPEC = JobSpec(prompt="hello", provider="simulated", max_tokens=4)
OTHER_BODY = JobSpec(prompt="another prompt", provider="simulated", max_tokens=4)


class Announced:
    def __init__(self) -> None:
        self.providers: list[str] = []

    def __call__(self, providers: Iterable[str]) -> None:
        self.providers.extend(providers)


@pytest.fixture
async def writer(wide_pool: asyncpg.Pool) -> AsyncIterator[CreateWriter]:
    writer = CreateWriter(wide_pool, None, Announced())
    task = asyncio.create_task(writer.run())
    await asyncio.sleep(0)  # the writer runs: creates from here on go through it
    yield writer
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _create_all(
    writer: CreateWriter, items: list[tuple[str, new_jobs.NewJob]], *, errors: bool = False
) -> list[object]:
    """Every item's outcome; a raised error is a failure of the test unless `errors`.
    (Refusals are returned, never raised, as from creates.create_many.)"""
    async with asyncio.timeout(20):
        return await asyncio.gather(
            *(writer.create(tenant, job) for tenant, job in items), return_exceptions=errors
        )


async def test_concurrent_creates_share_a_statement_and_each_gets_its_own_job(
    writer: CreateWriter, wide_pool: asyncpg.Pool
) -> None:
    outcomes = await _create_all(
        writer, [("default", new_jobs.NewJob(SPEC, f"key-{n}")) for n in range(32)]
    )
    assert all(isinstance(o, new_jobs.Created) and o.created for o in outcomes)
    ids = [o.job.id for o in outcomes if isinstance(o, new_jobs.Created)]
    assert len(set(ids)) == 32
    rows = await wide_pool.fetch(
        "SELECT idempotency_key, created_at FROM jobs WHERE id = ANY($1::uuid[])", ids
    )
    by_key = {r["idempotency_key"] for r in rows}
    assert by_key == {f"key-{n}" for n in range(32)}
    # A statement's rows share its timestamp: far fewer statements than creates. (The first
    # create may be written alone while the others arrive, and two writes may be in flight.)
    assert len({r["created_at"] for r in rows}) <= 3


async def test_one_key_in_one_statement_makes_one_job_and_a_changed_body_is_refused(
    writer: CreateWriter, wide_pool: asyncpg.Pool
) -> None:
    same = [("default", new_jobs.NewJob(SPEC, "shared")) for _ in range(10)]
    changed = [("default", new_jobs.NewJob(OTHER_BODY, "shared")) for _ in range(3)]
    outcomes = await _create_all(writer, same + changed)
    made = [o for o in outcomes[:10] if isinstance(o, new_jobs.Created)]
    assert len(made) == 10
    assert len({o.job.id for o in made}) == 1
    assert sum(o.created for o in made) == 1  # the others are replays
    assert all(isinstance(o, IdempotencyConflict) for o in outcomes[10:])
    count = await wide_pool.fetchval("SELECT count(*) FROM jobs WHERE idempotency_key = 'shared'")
    assert count == 1


async def test_tenants_in_one_batch_each_get_their_own_jobs(
    writer: CreateWriter, wide_pool: asyncpg.Pool
) -> None:
    await wide_pool.execute(
        "INSERT INTO tenants (id, name, max_running) VALUES ('other', 'Other', 10)"
    )
    items = [(t, new_jobs.NewJob(SPEC, f"k-{n}")) for n in range(6) for t in ("default", "other")]
    outcomes = await _create_all(writer, items)
    for (tenant, _), outcome in zip(items, outcomes, strict=True):
        assert isinstance(outcome, new_jobs.Created) and outcome.created
        assert outcome.job.tenant_id == tenant
    # The same key under two tenants is two jobs.
    assert len({o.job.id for o in outcomes if isinstance(o, new_jobs.Created)}) == 12


async def test_an_item_the_database_refuses_fails_alone(
    writer: CreateWriter, wide_pool: asyncpg.Pool
) -> None:
    # jsonb cannot hold U+0000: the statement with this item fails, and is written again item
    # by item, so only this item's caller sees the error.
    bad = JobSpec(prompt="nul \x00 here", provider="simulated", max_tokens=4)
    items = [("default", new_jobs.NewJob(SPEC, f"ok-{n}")) for n in range(8)]
    items.insert(3, ("default", new_jobs.NewJob(bad, "bad")))
    outcomes = await _create_all(writer, items, errors=True)
    assert isinstance(outcomes[3], asyncpg.PostgresError)
    rest = outcomes[:3] + outcomes[4:]
    assert all(isinstance(o, new_jobs.Created) and o.created for o in rest)
    keys = {r["idempotency_key"] for r in await wide_pool.fetch("SELECT idempotency_key FROM jobs")}
    assert keys == {f"ok-{n}" for n in range(8)}


async def test_without_a_running_writer_a_create_is_written_alone(wide_pool: asyncpg.Pool) -> None:
    announced = Announced()
    writer = CreateWriter(wide_pool, None, announced)  # never run
    async with asyncio.timeout(10):
        outcome = await writer.create("default", new_jobs.NewJob(SPEC, "alone"))
    assert isinstance(outcome, new_jobs.Created) and outcome.created
    assert announced.providers == ["simulated"]


async def test_every_field_is_stored_exactly_as_given(pool: asyncpg.Pool) -> None:
    """INSERT_JOBS takes a batch as one JSON parameter: text, numbers, money and times come out
    of the row exactly as they went in, and the jobs keep their order."""
    # An offset RFC 3339 allows and PostgreSQL's text input does not (at most 15:59).
    run_at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=19, minutes=32)))
    odd = 'quote " backslash \\ tab \t newline \n é 日本 🙂 \u2028'
    rich = JobSpec(
        prompt=odd, provider="simulated", model="m-1", max_tokens=7, priority=-3,
        max_attempts=2, retry_unknown=True, timeout_s=12.5,
        webhook_url="https://example.com/hook?a=1&b=2", metadata={"k": odd, "n": [1, 2.5, None]},
        run_at=run_at, retain_s=3600,
    )  # fmt: skip
    later = JobSpec(prompt="later", provider="simulated", delay_s=30.25)
    items = [
        new_jobs.NewJob(rich, "key " + odd, Decimal("0.00000123")),
        new_jobs.NewJob(later, None, Decimal("12.5")),
    ]
    outcomes = await creates.create_many(pool, "default", items)
    created = [o.job for o in outcomes if isinstance(o, new_jobs.Created)]
    assert len(created) == 2
    # Read back: the create's answer is built from what it sent (JobRow.inserted).
    async with pool.acquire() as conn:
        made = [await job_reads.get(conn, "default", job.id) for job in created]
    first, second = made
    assert first.payload == rich.payload() and first.metadata == rich.metadata
    assert first.idempotency_key == "key " + odd and first.request_hash == items[0].request_hash
    assert (first.priority, first.max_attempts, first.retain_s) == (-3, 2, 3600)
    assert first.webhook_url == rich.webhook_url
    assert first.reserved_usd == first.estimate_usd == Decimal("0.00000123")
    assert first.run_after == run_at
    assert second.reserved_usd == Decimal("12.5") and second.idempotency_key is None
    assert second.run_after - second.created_at == timedelta(seconds=30.25)
    # Request order is insert order: the first item's row was written first.
    order = await pool.fetch(
        "SELECT id FROM jobs WHERE id = ANY($1::uuid[]) ORDER BY ctid", [j.id for j in made]
    )
    assert [r["id"] for r in order] == [first.id, second.id]
