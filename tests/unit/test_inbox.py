"""The attempt's inbox: every waiting message at once, in order; a deadline ends an empty wait."""

from __future__ import annotations

import asyncio

from worker.inbox import Inbox, Interrupted, Message, StreamEnded
from worker.providers.base import TextDelta


async def test_a_read_takes_every_waiting_message_in_order() -> None:
    inbox = Inbox()
    sent: list[Message] = [TextDelta("a"), TextDelta("b"), StreamEnded()]
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
    inbox.put_nowait(TextDelta("x"))
    async with asyncio.timeout(5):
        assert await reader == [TextDelta("x")]


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
