"""The attempt's inbox: every waiting ending at once, in order; a deadline or a wake ends an
empty wait."""

from __future__ import annotations

import asyncio

from jobstream.worker.inbox import (
    CancelRequested,
    Ending,
    Inbox,
    Interrupted,
    LeaseLost,
    StreamEnded,
)


async def test_a_read_takes_every_waiting_message_in_order() -> None:
    inbox = Inbox()
    sent: list[Ending] = [LeaseLost("moved on"), CancelRequested(), StreamEnded()]
    for message in sent:
        inbox.put_nowait(message)
    assert await inbox.take() == sent
    inbox.put_nowait(Interrupted())
    assert await inbox.take(deadline=0.0) == [Interrupted()]  # waiting messages beat a deadline


async def test_an_empty_read_waits_for_the_next_message() -> None:
    inbox = Inbox()
    reader = asyncio.create_task(inbox.take())
    await asyncio.sleep(0)
    assert not reader.done()
    inbox.put_nowait(CancelRequested())
    async with asyncio.timeout(5):
        assert await reader == [CancelRequested()]


async def test_an_empty_read_ends_at_its_deadline_and_leaves_no_timer() -> None:
    inbox = Inbox()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.02
    async with asyncio.timeout(5):
        assert await inbox.take(deadline) == []
    assert loop.time() >= deadline
    # A message after the expired wait is kept for the next read, not lost to the old waiter.
    inbox.put_nowait(StreamEnded())
    assert await inbox.take(loop.time() + 60) == [StreamEnded()]


async def test_a_wake_ends_a_wait_empty_and_is_not_kept_for_later() -> None:
    # The pump wakes the runner when a flush falls due; the deltas are in the coalescer.
    inbox = Inbox()
    loop = asyncio.get_running_loop()
    reader = asyncio.create_task(inbox.take(loop.time() + 60))
    await asyncio.sleep(0)
    inbox.wake()
    async with asyncio.timeout(5):
        assert await reader == []
    inbox.wake()  # nobody waits: nothing is kept
    deadline = loop.time() + 0.02
    async with asyncio.timeout(5):
        assert await inbox.take(deadline) == []
    assert loop.time() >= deadline
