"""The per-stream Flag: what asyncio.Event does for a set-once signal, plus callbacks."""

from __future__ import annotations

import asyncio

from jobstream.server.flag import Flag


async def test_set_wakes_every_waiter_and_calls_back_once() -> None:
    flag, called = Flag(), []
    flag.add_callback(lambda: called.append("a"))
    waiters = [asyncio.create_task(flag.wait()) for _ in range(2)]
    await asyncio.sleep(0)  # both park on the unset flag
    assert not any(w.done() for w in waiters)
    flag.set()
    flag.set()
    assert await asyncio.gather(*waiters) == [True, True]
    assert called == ["a"] and flag.is_set()
    flag.add_callback(lambda: called.append("late"))  # already set: called at once
    assert called == ["a", "late"]


async def test_a_removed_callback_or_cancelled_waiter_is_not_called() -> None:
    flag, called = Flag(), []

    def callback() -> None:
        called.append(1)

    flag.add_callback(callback)
    flag.remove_callback(callback)
    waiter = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    flag.set()
    assert called == [] and waiter.cancelled()
