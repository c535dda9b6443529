"""A batch written a chunk at a time (creates.create_batch): each chunk's statement runs while the
next chunk is made, all in one transaction, and every item gets the answer a batch of one
statement would have given it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal

import asyncpg
import pytest

from jobstream import creates, new_jobs
from jobstream.errors import BudgetExceeded, IdempotencyConflict, RateLimited
from jobstream.jobspec import JobSpec
from jobstream.sql import queries
from tests.support.polling import eventually, lock_waits

CreateOutcome = new_jobs.Created | new_jobs.Refusal


def new(prompt: str, key: str | None = None) -> new_jobs.NewJob:
    return new_jobs.NewJob(JobSpec(prompt=prompt, provider="simulated", max_tokens=4), key)


def chunked(items: list[new_jobs.NewJob], size: int) -> Iterator[list[new_jobs.NewJob]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def prompts(pool: asyncpg.Pool) -> dict[str, str]:
    rows = await pool.fetch("SELECT id, payload->>'prompt' AS prompt FROM jobs")
    return {str(r["id"]): r["prompt"] for r in rows}


async def test_items_across_chunks_are_answered_in_order_with_duplicates_resolved(
    pool: asyncpg.Pool,
) -> None:
    await creates.create_many(pool, "default", [new("made before", "old")])
    items = [new(f"p{i}", f"k{i}") for i in range(25)]
    items[3] = new("made before", "old")  # a replay of an earlier create
    items[12] = new("p1", "k1")  # chunk 2 repeats chunk 1's item: the same job
    items[21] = new("another body", "k2")  # and another body under chunk 1's key
    items[22] = new("no key")
    told: dict[int, new_jobs.Created] = {}
    outcomes = await creates.create_batch(
        pool, "default", chunked(items, 10), on_created=told.__setitem__
    )

    assert len(outcomes) == len(items)
    # Told of every new job, each once, at its place: not of replays, duplicates or refusals.
    made_here = {
        i: o for i, o in enumerate(outcomes) if isinstance(o, new_jobs.Created) and o.created
    }
    assert told == made_here and len(told) == 22
    made = await prompts(pool)
    conflict = outcomes[21]
    assert isinstance(conflict, IdempotencyConflict)
    for i, outcome in enumerate(outcomes):
        if i == 21:
            continue
        assert isinstance(outcome, new_jobs.Created), (i, outcome)
        assert made[str(outcome.job.id)] == items[i].spec.prompt  # each answer is its own item's
        assert outcome.created is (i not in (3, 12)), i
    assert str(outcomes[12].job.id) == str(outcomes[1].job.id)  # type: ignore[union-attr]
    # 25 items less a replay, a duplicate and a conflict, plus the job made before.
    assert len(made) == 23
    assert await pool.fetchval("SELECT count(*) FROM job_log") == 23


async def test_a_batch_whose_making_fails_midway_makes_no_job(pool: asyncpg.Pool) -> None:
    def failing() -> Iterator[list[new_jobs.NewJob]]:
        yield [new(f"first {i}") for i in range(10)]  # its statement is sent, then:
        raise RuntimeError("the next chunk could not be made")

    with pytest.raises(RuntimeError, match="could not be made"):
        await creates.create_batch(pool, "default", failing())
    assert await prompts(pool) == {}
    # The connection went back to the pool whole: the next batch is written.
    outcomes = await creates.create_batch(pool, "default", chunked([new("later")], 10))
    assert isinstance(outcomes[0], new_jobs.Created)
    assert list((await prompts(pool)).values()) == ["later"]


async def test_a_tenant_with_a_create_rate_counts_every_chunk_of_a_batch(
    pool: asyncpg.Pool,
) -> None:
    await pool.execute("UPDATE tenants SET create_rate_per_min = 12 WHERE id = 'default'")
    items = [new(f"r{i}", f"r{i}") for i in range(30)]
    outcomes = await creates.create_batch(pool, "default", chunked(items, 10))
    assert [isinstance(o, new_jobs.Created) for o in outcomes] == [True] * 12 + [False] * 18
    assert all(isinstance(o, RateLimited) for o in outcomes[12:])
    assert sorted((await prompts(pool)).values()) == sorted(f"r{i}" for i in range(12))


async def test_batches_with_the_same_keys_in_opposite_orders_never_deadlock(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Streamed a chunk at a time, each batch's first chunk took keys the other's later chunks
    # needed: PostgreSQL aborted one of them, and a retry could meet the same fate (CI saw three
    # in a row). Keys taken last and in key order leave one batch waiting for the other, never
    # both: with no second try allowed, every round succeeds.
    monkeypatch.setattr(creates, "BATCH_TRIES", 1)
    for round_ in range(3):
        items = [new(f"p{i}", f"r{round_}-{i}") for i in range(30)]
        forward, backward = await asyncio.gather(
            creates.create_batch(pool, "default", chunked(items, 10)),
            creates.create_batch(pool, "default", chunked(items[::-1], 10)),
        )
        for a, b in zip(forward, backward[::-1], strict=True):
            assert isinstance(a, new_jobs.Created) and isinstance(b, new_jobs.Created)
            assert a.job.id == b.job.id and a.created is not b.created
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 90


async def test_a_batch_books_what_its_new_jobs_reserve_once(pool: asyncpg.Pool) -> None:
    cent = Decimal("0.01")
    await creates.create_many(pool, "default", [new_jobs.NewJob(new("old").spec, "old", cent)])
    # Keyed and unkeyed items across chunks, a replay, and a duplicate within the batch.
    items = [
        new_jobs.NewJob(new(f"p{i}").spec, f"k{i}" if i % 2 else None, cent) for i in range(25)
    ]
    items[4] = new_jobs.NewJob(new("old").spec, "old", cent)
    items[17] = new_jobs.NewJob(items[1].spec, "k1", cent)
    outcomes = await creates.create_batch(pool, "default", chunked(items, 10))
    made = sum(isinstance(o, new_jobs.Created) and o.created for o in outcomes)
    assert made == 23
    reserved = await pool.fetchval("SELECT reserved_usd FROM tenant_balances")
    assert reserved == cent * (made + 1)


async def test_a_budget_admits_a_mixed_batch_in_request_order(pool: asyncpg.Pool) -> None:
    # The keyed items are written after the others; the budget still goes to the first items
    # of the request, keyed or not.
    await pool.execute("UPDATE tenants SET budget_usd = 0.05 WHERE id = 'default'")
    cent = Decimal("0.01")
    items = [new_jobs.NewJob(new(f"b{i}").spec, f"b{i}" if i % 2 else None, cent) for i in range(9)]
    outcomes = await creates.create_batch(pool, "default", chunked(items, 4))
    assert [isinstance(o, new_jobs.Created) for o in outcomes] == [True] * 5 + [False] * 4
    assert all(isinstance(o, BudgetExceeded) for o in outcomes[5:])
    assert sorted((await prompts(pool)).values()) == [f"b{i}" for i in range(5)]


async def test_a_batch_aborted_for_a_deadlock_is_written_again_whole(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer outside the key order (this test's transaction: 'x', then 'a') closes a cycle
    # with the batch, which holds 'a' and waits for 'x'. The batch, waiting longest, is the one
    # PostgreSQL aborts (the other's deadlock_timeout is longer); its second try makes every
    # job once.
    monkeypatch.setattr(creates, "BATCH_TRIES", 2)
    items = [new(f"p{i}") for i in range(10)] + [new("a", "a"), new("x", "x")]
    key_row = (
        "INSERT INTO tenant_jobs (tenant_id, created_at, job_id, idempotency_key)"
        " VALUES ('default', now(), gen_random_uuid(), $1)"
    )
    async with pool.acquire() as other:
        tx = other.transaction()
        await tx.start()
        await other.execute("SET LOCAL deadlock_timeout = '30s'")
        await other.execute(key_row, "x")
        writing = asyncio.ensure_future(creates.create_batch(pool, "default", chunked(items, 10)))
        # The batch, holding 'a', waits for 'x'.
        await eventually(lambda: lock_waits(pool), lambda n: n == 1, what="the batch waits")
        await other.execute(key_row, "a")  # waits for the batch, until its abort
        await tx.rollback()
        outcomes = await writing
    assert all(isinstance(o, new_jobs.Created) and o.created for o in outcomes)
    assert sorted((await prompts(pool)).values()) == sorted(i.spec.prompt for i in items)


async def test_keys_promised_in_order_must_ascend_across_chunks(pool: asyncpg.Pool) -> None:
    ascending = [new(f"p{i}", f"k{i:02}") for i in range(20)]
    # Out of order within a chunk is fine (the statement sorts them); across chunks it is not.
    chunks = [ascending[start : start + 5][::-1] for start in range(0, 20, 5)]
    outcomes = await creates.create_batch(pool, "default", iter(chunks), in_key_order=True)
    assert all(isinstance(o, new_jobs.Created) and o.created for o in outcomes)
    descending = [new(f"d{i}", f"d{i:02}") for i in range(20)][::-1]
    with pytest.raises(ValueError, match="ascending key order"):
        await creates.create_batch(pool, "default", chunked(descending, 5), in_key_order=True)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 20


async def key_taken_meanwhile(
    pool: asyncpg.Pool, key: str, create: Callable[[], Awaitable[list[CreateOutcome]]]
) -> tuple[uuid.UUID, list[CreateOutcome]]:
    """`create` runs while another transaction has inserted a job with `key` and not committed:
    it waits for that key, then the other commits. The job the other made, and what `create`
    answered."""
    job_id = str(uuid.uuid4())
    async with pool.acquire() as other:
        tx = other.transaction()
        await tx.start()
        args = new_jobs.insert_args([job_id], "default", [new("first", key)], None)
        [made] = await other.fetch(queries.INSERT_JOBS, *args)
        assert made["id"] is not None
        writing = asyncio.ensure_future(create())
        await eventually(lambda: lock_waits(pool), lambda n: n == 1, what="the create waits")
        await tx.commit()
        return uuid.UUID(job_id), await writing


async def test_a_create_that_loses_the_race_for_its_key_answers_with_the_winners_job(
    pool: asyncpg.Pool,
) -> None:
    # Its plain insert of the key fails once the other commits; sent again, it finds the key
    # taken and answers with that job (INSERT_JOBS, creates.KEY_RACE_TRIES).
    winner, [outcome] = await key_taken_meanwhile(
        pool, "k", lambda: creates.create_many(pool, "default", [new("first", "k")])
    )
    assert isinstance(outcome, new_jobs.Created) and not outcome.created
    assert outcome.job.id == winner
    assert list((await prompts(pool)).values()) == ["first"]


async def test_a_batch_that_loses_the_race_for_a_key_is_written_again_whole(
    pool: asyncpg.Pool,
) -> None:
    items = [new(f"p{i}") for i in range(10)] + [new("first", "k"), new("z", "z")]
    winner, outcomes = await key_taken_meanwhile(
        pool, "k", lambda: creates.create_batch(pool, "default", chunked(items, 5))
    )
    assert [isinstance(o, new_jobs.Created) and o.created for o in outcomes] == [True] * 10 + [
        False,
        True,
    ]
    replay = outcomes[10]
    assert isinstance(replay, new_jobs.Created) and replay.job.id == winner
    assert sorted((await prompts(pool)).values()) == sorted(i.spec.prompt for i in items)
