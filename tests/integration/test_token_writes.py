"""A worker's streams share one token write a tick: each attempt still gets its own answer."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import asyncpg
import pytest

from jobstream import attempts, claims, token_appends
from jobstream.errors import Fenced
from jobstream.token_appends import TokenAppend
from jobstream.usage import Usage
from jobstream.worker.token_writes import TokenWrites
from tests.support import attempt_driver as drive
from tests.support.workers import create_job, event_list, manual_clock, reassemble

LEASE_S = 30.0


async def test_one_fenced_stream_in_a_group_write_does_not_cost_the_others_their_tokens(
    pool: asyncpg.Pool,
) -> None:
    clock = manual_clock()
    for _ in range(4):
        await create_job(pool)
    claim = {"providers": ["simulated"], "worker_id": "w", "lease_s": LEASE_S, "clock": clock}
    stale = await claims.claim(pool, **claim)  # type: ignore[arg-type]
    assert stale is not None
    clock.advance(LEASE_S + 1)
    assert await attempts.reap_expired(pool, clock) == 1
    others = await claims.claim_batch(pool, max_jobs=4, **claim)  # type: ignore[arg-type]
    assert stale.job_id in {held.job_id for held in others}  # it runs again, under a new token
    writes = TokenWrites(pool, min_interval_s=0.05)
    writer = asyncio.create_task(writes.run())
    try:
        async with asyncio.timeout(10):
            answers = await asyncio.gather(
                writes.append(TokenAppend(stale, ["stale "], 0)),
                *(writes.append(TokenAppend(held, [f"{n} ", "more "], 0)) for n, held in
                  enumerate(others)),
            )  # fmt: skip
    finally:
        writer.cancel()
    assert (answers[0].held, answers[0].last_seq) == (False, None)
    assert all(a.held and a.last_seq is not None for a in answers[1:])
    # One statement wrote them all: its timestamp is on every job it moved.
    stamps = await pool.fetch(
        "SELECT DISTINCT updated_at FROM jobs WHERE id = ANY($1::uuid[])",
        [held.job_id for held in others],
    )
    assert len(stamps) == 1
    for n, held in enumerate(others):
        log = await event_list(pool, held.job_id)
        assert reassemble(log) == f"{n} more "  # never the stale attempt's text
        assert [e.seq for e in log] == list(range(1, len(log) + 1))


async def test_the_writer_answers_each_stream_in_order_and_refuses_a_stale_offset(
    pool: asyncpg.Pool,
) -> None:
    clock = manual_clock()
    job_id = await create_job(pool)
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=LEASE_S, clock=clock
    )
    assert held is not None
    (first,) = await token_appends.append_tokens_many(pool, [TokenAppend(held, ["ab", "cd"], 0)])
    # The same offset again (a write in doubt sent twice): refused, the job still held.
    (again,) = await token_appends.append_tokens_many(pool, [TokenAppend(held, ["ab"], 0)])
    (after,) = await token_appends.append_tokens_many(pool, [TokenAppend(held, ["e"], 4)])
    assert first.held and first.last_seq is not None
    assert (again.held, again.last_seq) == (True, None)
    assert after.last_seq == first.last_seq + 1
    log = await event_list(pool, job_id)
    assert [e.data["text"] for e in log if e.type == "token"] == ["ab", "cd", "e"]


async def test_a_successs_last_chunk_lands_only_at_the_offset_it_expects(
    pool: asyncpg.Pool,
) -> None:
    """The chunk a success carries is compare-and-set on the attempt's text offset, as every
    token append is. A worker that believes the log holds nothing while a write in doubt landed
    ("ab") would have made the log "ab" + "abcd"; the success is refused instead, the job stays
    the attempt's, and the success sent from the right offset lands."""
    await create_job(pool)
    held = await drive.claim(pool)
    await drive.tokens(pool, held, ["ab"])  # the write in doubt, which landed
    usage = Usage(input_tokens=1, output_tokens=2, cost_usd=Decimal("0.0001"))
    stale = attempts.Success(held, "abcd", usage, last_chunk="abcd", text_at=0)
    with pytest.raises(Fenced):
        await attempts.accept(pool, stale, drive.CLOCK)
    status = await pool.fetchval("SELECT status FROM jobs WHERE id = $1", held.job_id)
    assert status == "running"
    assert reassemble(await event_list(pool, held.job_id)) == "ab"
    right = attempts.Success(held, "abcd", usage, last_chunk="cd", text_at=2)
    await attempts.accept(pool, right, drive.CLOCK)
    assert reassemble(await event_list(pool, held.job_id)) == "abcd"
    chars = await pool.fetchval("SELECT text_chars FROM jobs WHERE id = $1", held.job_id)
    assert chars == 4
