"""A batch written a chunk at a time (creates.create_batch): each chunk's statement runs while the
next chunk is made, all in one transaction, and every item gets the answer a batch of one
statement would have given it."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import pytest

from jobstream import creates
from jobstream.errors import IdempotencyConflict, RateLimited
from jobstream.jobspec import JobSpec


def new(prompt: str, key: str | None = None) -> creates.NewJob:
    return creates.NewJob(JobSpec(prompt=prompt, provider="simulated", max_tokens=4), key)


def chunked(items: list[creates.NewJob], size: int) -> Iterator[list[creates.NewJob]]:
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
    told: dict[int, creates.Created] = {}
    outcomes = await creates.create_batch(
        pool, "default", chunked(items, 10), on_created=told.__setitem__
    )

    assert len(outcomes) == len(items)
    # Told of every new job, each once, at its place: not of replays, duplicates or refusals.
    made_here = {
        i: o for i, o in enumerate(outcomes) if isinstance(o, creates.Created) and o.created
    }
    assert told == made_here and len(told) == 22
    made = await prompts(pool)
    conflict = outcomes[21]
    assert isinstance(conflict, IdempotencyConflict)
    for i, outcome in enumerate(outcomes):
        if i == 21:
            continue
        assert isinstance(outcome, creates.Created), (i, outcome)
        assert made[str(outcome.job.id)] == items[i].spec.prompt  # each answer is its own item's
        assert outcome.created is (i not in (3, 12)), i
    assert str(outcomes[12].job.id) == str(outcomes[1].job.id)  # type: ignore[union-attr]
    # 25 items less a replay, a duplicate and a conflict, plus the job made before.
    assert len(made) == 23
    assert await pool.fetchval("SELECT count(*) FROM job_log") == 23


async def test_a_batch_whose_making_fails_midway_makes_no_job(pool: asyncpg.Pool) -> None:
    def failing() -> Iterator[list[creates.NewJob]]:
        yield [new(f"first {i}") for i in range(10)]  # its statement is sent, then:
        raise RuntimeError("the next chunk could not be made")

    with pytest.raises(RuntimeError, match="could not be made"):
        await creates.create_batch(pool, "default", failing())
    assert await prompts(pool) == {}
    # The connection went back to the pool whole: the next batch is written.
    outcomes = await creates.create_batch(pool, "default", chunked([new("later")], 10))
    assert isinstance(outcomes[0], creates.Created)
    assert list((await prompts(pool)).values()) == ["later"]


async def test_a_tenant_with_a_create_rate_counts_every_chunk_of_a_batch(
    pool: asyncpg.Pool,
) -> None:
    await pool.execute("UPDATE tenants SET create_rate_per_min = 12 WHERE id = 'default'")
    items = [new(f"r{i}", f"r{i}") for i in range(30)]
    outcomes = await creates.create_batch(pool, "default", chunked(items, 10))
    assert [isinstance(o, creates.Created) for o in outcomes] == [True] * 12 + [False] * 18
    assert all(isinstance(o, RateLimited) for o in outcomes[12:])
    assert sorted((await prompts(pool)).values()) == sorted(f"r{i}" for i in range(12))
