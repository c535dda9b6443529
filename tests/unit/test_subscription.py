"""A subscriber's bounded buffer: delivers in order, cuts off instead of growing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from jobstream.events import Event
from jobstream.server.hub import Hub
from jobstream.server.subscription import Subscription, SubscriptionClosed


def events(*seqs: int) -> list[Event]:
    return [Event(seq, "token", 1, {"text": str(seq)}, datetime.now(UTC)) for seq in seqs]


def subscription(limit: int, released: list[Subscription]) -> Subscription:
    return Subscription(uuid.uuid4(), limit, released.append)


async def get(sub: Subscription) -> list[Event]:
    """Everything buffered, waiting for at least one event: how the tail reads (server/tail.py)."""
    while not (batch := sub.take()):
        await sub.arrival()
    return batch


async def test_batches_arrive_in_order_and_wake_the_reader() -> None:
    sub = subscription(10, [])
    reader = asyncio.create_task(get(sub))
    await asyncio.sleep(0)  # one turn of the loop: the reader runs until it waits
    assert not reader.done()  # parked on an empty buffer, so the offer below must wake it
    assert sub.offer(events(1, 2))
    assert [e.seq for e in await reader] == [1, 2]
    sub.offer(events(3))
    sub.offer(events(4))
    assert [e.seq for e in await get(sub)] == [3, 4]


async def test_an_offer_past_the_limit_is_refused_whole() -> None:
    sub = subscription(3, [])
    assert sub.offer(events(1, 2))
    assert not sub.offer(events(3, 4))
    assert [e.seq for e in await get(sub)] == [1, 2]


async def test_close_wakes_the_reader_after_what_was_buffered_and_releases_once() -> None:
    released: list[Subscription] = []
    sub = subscription(3, released)
    sub.offer(events(1))
    sub.close("overflow")
    sub.close()
    assert sub.closed.is_set() and released == [sub]
    assert [e.seq for e in await get(sub)] == [1]
    with pytest.raises(SubscriptionClosed) as closed:
        await get(sub)
    assert closed.value.reason == "overflow"


async def test_a_subscribe_abandoned_while_the_feed_starts_leaves_nothing_behind() -> None:
    # The feed's first read never returns: the caller gives up (its client went away).
    class Stuck:
        async def fetchval(self, *args: object) -> int:
            await asyncio.Event().wait()
            return 0

    hub = Hub(
        database_url="postgresql://unused", pool=Stuck(),  # type: ignore[arg-type]
        recheck_s=60, probe_s=60, buffer=4,
    )  # fmt: skip
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await hub.subscribe(uuid.uuid4())
    assert hub.subscribers == 0
    await hub.stop()


async def test_a_wait_cut_short_leaves_the_next_wait_working() -> None:
    # A long-poll's timeout cancels the reader's wait; the same subscription read again (as the
    # tail does) must still be woken by the next offer, not fail on the cancelled wait.
    sub = subscription(10, [])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await get(sub)
    reader = asyncio.create_task(get(sub))
    await asyncio.sleep(0)
    assert not reader.done()
    sub.offer(events(1))
    assert [e.seq for e in await asyncio.wait_for(reader, 5)] == [1]


async def test_take_hands_out_the_buffer_without_waiting() -> None:
    sub = subscription(10, [])
    assert sub.take() == []
    sub.offer(events(1, 2))
    assert sub.arrival().done()  # events are there: nothing to wait for
    assert [e.seq for e in sub.take()] == [1, 2]
    assert sub.take() == []
    sub.close("gone")
    with pytest.raises(SubscriptionClosed):
        sub.take()
