"""The worker's token writer takes each stream's due text itself (worker/token_pull.py): what
lands, and what reaches the runner when a write goes wrong."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from jobstream import attempts, claims
from jobstream.claims import Claimed
from jobstream.worker.coalescer import Coalescer
from jobstream.worker.inbox import Inbox, LeaseLost
from jobstream.worker.token_log import TokenLog
from jobstream.worker.token_pull import TokenPull
from jobstream.worker.token_writes import TokenWrites
from tests.integration.test_token_log import FlakyPool
from tests.support.polling import eventually
from tests.support.workers import create_job, event_list, manual_clock, reassemble

INTERVAL_S = 0.05
LEASE_S = 30.0


@dataclass
class Stream:
    """One attempt's side, as a runner holds it, attached to a running writer."""

    held: Claimed
    flaky: FlakyPool
    coalescer: Coalescer
    tokens: TokenLog
    inbox: Inbox
    pull: TokenPull

    async def send(self, text: str) -> None:
        """`text` as due at once, announced as the pump does; until the writer answered."""
        loop = asyncio.get_running_loop()
        self.coalescer.add(text, loop.time() - INTERVAL_S)
        self.pull.pending(loop.time())
        await eventually(
            self._settled, lambda done: done, what=f"the writer took and answered {text!r}"
        )

    async def _settled(self) -> bool:
        return not self.pull.in_flight and (self.coalescer.due_at is None or self.tokens.in_doubt)


@pytest.fixture
async def stream(pool: asyncpg.Pool) -> AsyncIterator[Stream]:
    await create_job(pool)
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=LEASE_S, clock=manual_clock()
    )
    assert held is not None
    flaky = FlakyPool(pool)
    writes = TokenWrites(flaky, min_interval_s=0)  # type: ignore[arg-type]
    writer = asyncio.create_task(writes.run())
    coalescer = Coalescer(interval_s=INTERVAL_S, max_bytes=4096)
    tokens = TokenLog(flaky, held, writer=writes.append)  # type: ignore[arg-type]
    inbox = Inbox()
    pull = TokenPull(coalescer, tokens, inbox, writes)
    pull.attach()
    try:
        yield Stream(held, flaky, coalescer, tokens, inbox, pull)
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_the_writer_takes_due_text_in_order_without_the_runner(
    pool: asyncpg.Pool, stream: Stream
) -> None:
    for text in ("0 1 ", "2 ", "3 4 "):
        await stream.send(text)
    assert not stream.tokens.in_doubt
    # The runner was told nothing: its inbox is empty.
    assert await stream.inbox.take(asyncio.get_running_loop().time()) == []
    assert reassemble(await event_list(pool, stream.held.job_id)) == "0 1 2 3 4 "


async def test_a_taken_write_in_doubt_goes_back_to_the_runner_and_lands_once(
    pool: asyncpg.Pool, stream: Stream
) -> None:
    await stream.send("0 1 ")
    stream.flaky.lose = "after"  # committed, but the reply is lost
    await stream.send("2 3 ")
    assert stream.tokens.in_doubt
    # The writer takes nothing more of it: the runner writes by itself until the log is sure.
    loop = asyncio.get_running_loop()
    stream.coalescer.add("4 ", loop.time() - INTERVAL_S)
    assert stream.pull.take(loop.time()) is None
    assert stream.pull.due_at is None
    # The runner's write: the text put back first, then what came since; reconciled, once.
    await stream.tokens.write(stream.coalescer.take())
    assert not stream.tokens.in_doubt
    await stream.send("5 ")
    assert reassemble(await event_list(pool, stream.held.job_id)) == "0 1 2 3 4 5 "


async def test_a_taken_write_sent_late_after_its_resend_is_not_stored_twice(
    pool: asyncpg.Pool, stream: Stream
) -> None:
    await stream.send("0 ")
    stream.flaky.lose = "late"
    await stream.send("1 2 ")
    assert stream.tokens.in_doubt
    await stream.tokens.write(stream.coalescer.take())  # "1 2 " is not there: sent again
    await stream.flaky.deliver()  # the first send arrives after all: stale offset, no row
    await stream.send("3 ")
    assert reassemble(await event_list(pool, stream.held.job_id)) == "0 1 2 3 "


async def test_nothing_is_taken_while_the_runner_writes_alone(stream: Stream) -> None:
    loop = asyncio.get_running_loop()
    stream.coalescer.add("0 ", loop.time() - INTERVAL_S)
    with stream.pull.writing_alone():
        assert stream.pull.take(loop.time()) is None
    assert stream.pull.take(loop.time()) is not None


async def test_a_fenced_stream_hears_it_through_its_inbox(
    pool: asyncpg.Pool, stream: Stream
) -> None:
    await stream.send("0 ")
    clock = manual_clock()
    clock.advance(LEASE_S + 1)
    assert await attempts.reap_expired(pool, clock) == 1  # another attempt's turn now
    await stream.send("1 ")
    messages = await stream.inbox.take(asyncio.get_running_loop().time() + 5)
    assert [type(m) for m in messages] == [LeaseLost]
    assert reassemble(await event_list(pool, stream.held.job_id)) == "0 "


class StuckPool:
    """A pool whose connections never come: a write holds its text until the writer stops."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[None]:
        self.waiting.set()
        await asyncio.get_running_loop().create_future()
        yield None


async def test_text_of_a_write_cut_short_by_the_writer_stopping_is_put_back(
    pool: asyncpg.Pool,
) -> None:
    # The worker is going: its writer is cancelled while a write holds this attempt's text.
    # The text must go back first in line (the runner settles with it), not vanish.
    await create_job(pool)
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=LEASE_S, clock=manual_clock()
    )
    assert held is not None
    stuck = StuckPool()
    writes = TokenWrites(stuck, min_interval_s=0)  # type: ignore[arg-type]
    writer = asyncio.create_task(writes.run())
    coalescer = Coalescer(interval_s=INTERVAL_S, max_bytes=4096)
    tokens = TokenLog(stuck, held, writer=writes.append)  # type: ignore[arg-type]
    pull = TokenPull(coalescer, tokens, Inbox(), writes)
    pull.attach()
    loop = asyncio.get_running_loop()
    coalescer.add("0 1 ", loop.time() - INTERVAL_S)
    pull.pending(loop.time())
    await asyncio.wait_for(stuck.waiting.wait(), 5)
    assert pull.in_flight and coalescer.due_at is None  # the write holds the text
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    assert not pull.in_flight
    assert coalescer.take() == ["0 1 "]
