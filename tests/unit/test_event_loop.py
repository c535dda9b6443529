"""running_loop: asyncio.get_running_loop without its system call, and never another's loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvloop

from jobstream.event_loop import running_loop


async def _both() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
    return running_loop(), asyncio.get_running_loop()


def test_it_is_the_running_loop_of_one_loop_after_another() -> None:
    first = asyncio.run(_both())
    second = uvloop.run(_both())
    assert first[0] is first[1] and second[0] is second[1]
    assert first[0] is not second[0]  # the first was kept, but it no longer runs


def test_outside_a_loop_it_raises_as_asyncio_does() -> None:
    asyncio.run(_both())  # a loop kept from before, now closed
    with pytest.raises(RuntimeError):
        running_loop()


def test_each_thread_gets_its_own_loop() -> None:
    seen: dict[str, asyncio.AbstractEventLoop] = {}
    inside = threading.Event()
    leave = threading.Event()

    async def hold(name: str) -> None:
        seen[name] = running_loop()
        inside.set()
        await asyncio.to_thread(leave.wait, 5)  # the other thread's loop runs meanwhile

    other = threading.Thread(target=asyncio.run, args=(hold("other"),))
    other.start()
    try:
        assert inside.wait(5)
        mine, actual = asyncio.run(_both())
        assert mine is actual and mine is not seen["other"]
    finally:
        leave.set()
        other.join(5)
