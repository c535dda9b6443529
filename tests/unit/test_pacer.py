"""The simulated provider's shared sleeps (worker/providers/pacer.py): each sleeper wakes at
the tick nearest its time (at most half a tick early), in the order they fall due."""

from __future__ import annotations

import asyncio

import pytest

from jobstream.worker.providers.pacer import Pacer

TICK_S = 0.005


async def _sleep_and_note(pacer: Pacer, seconds: float, woke: list[tuple[float, float]]) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pacer.sleep(seconds)
    woke.append((seconds, loop.time() - started))


async def test_sleepers_wake_in_due_order_at_most_half_a_tick_early() -> None:
    pacer = Pacer(TICK_S)
    woke: list[tuple[float, float]] = []
    asked = [0.04, 0.01, 0.03, 0.01, 0.02, 0.0]
    await asyncio.wait_for(
        asyncio.gather(*(_sleep_and_note(pacer, s, woke) for s in asked)), timeout=5
    )
    assert [s for s, _ in woke] == sorted(asked)
    # At most half a tick early (and the event loop's clock resolution).
    resolution = asyncio.get_running_loop()._clock_resolution  # type: ignore[attr-defined]
    assert all(slept >= s - TICK_S / 2 - resolution for s, slept in woke)


async def test_a_cancelled_sleeper_leaves_the_others_on_time() -> None:
    pacer = Pacer(TICK_S)
    woke: list[tuple[float, float]] = []

    async def sleep_through() -> None:
        await pacer.sleep(0.02)

    doomed = asyncio.create_task(sleep_through())
    others = [asyncio.create_task(_sleep_and_note(pacer, s, woke)) for s in (0.02, 0.03)]
    await asyncio.sleep(0)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await asyncio.wait_for(asyncio.gather(*others), timeout=5)
    assert [s for s, _ in woke] == [0.02, 0.03]


def test_one_pacer_serves_one_event_loop_after_another() -> None:
    # The provider outlives a test's event loop: what waited on an old loop does not stall it.
    pacer = Pacer(TICK_S)

    async def abandoned() -> None:
        pacer.sleep(60)  # nobody waits for it, and the loop ends
        await asyncio.sleep(0)

    asyncio.run(abandoned())
    woke: list[tuple[float, float]] = []
    asyncio.run(asyncio.wait_for(_sleep_and_note(pacer, 0.01, woke), timeout=5))
    assert [s for s, _ in woke] == [0.01]
