"""GroupWriter's edges: a stopped writer leaves no caller waiting for ever."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

import pytest

from jobstream.group_write import GroupWriter

T = TypeVar("T")


async def submit_all(
    writer: GroupWriter[int, T], items: range, *, return_exceptions: bool = False
) -> list[T | BaseException]:
    """Run `writer` while every item is submitted at once; the answers, in order."""
    task = asyncio.create_task(writer.run())
    try:
        async with asyncio.timeout(5):
            return await asyncio.gather(
                *(writer.submit(n) for n in items), return_exceptions=return_exceptions
            )
    finally:
        task.cancel()


async def test_callers_of_a_stopped_writer_are_cancelled_not_left_waiting() -> None:
    entered = asyncio.Event()

    async def never_answers(items: Sequence[int]) -> list[int]:
        entered.set()
        await asyncio.Event().wait()
        return list(items)

    writer: GroupWriter[int, int] = GroupWriter("test", never_answers, max_batch=1, in_flight=1)
    task = asyncio.create_task(writer.run())
    in_flight = asyncio.ensure_future(writer.submit(1))  # taken by the one write allowed
    queued = asyncio.ensure_future(writer.submit(2))  # still pending when the writer stops
    async with asyncio.timeout(5):
        await entered.wait()
        task.cancel()
        outcomes = await asyncio.gather(in_flight, queued, task, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)


async def test_answers_come_back_to_their_callers_in_order() -> None:
    batches: list[list[int]] = []

    async def double(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        return [2 * item for item in items]

    writer: GroupWriter[int, int] = GroupWriter("test", double, max_batch=3)
    answers = await submit_all(writer, range(7))
    assert answers == [2 * n for n in range(7)]
    assert all(len(batch) <= 3 for batch in batches) and len(batches) < 7


@pytest.mark.parametrize("size", [1, 4])
async def test_a_refused_batch_is_written_item_by_item(size: int) -> None:
    async def refuse_odd(items: Sequence[int]) -> list[int]:
        if any(item % 2 for item in items):
            raise ValueError("odd")
        return list(items)

    writer: GroupWriter[int, int] = GroupWriter("test", refuse_odd, max_batch=size)
    outcomes = await submit_all(writer, range(4), return_exceptions=True)
    assert outcomes[0] == 0 and outcomes[2] == 2
    assert isinstance(outcomes[1], ValueError) and isinstance(outcomes[3], ValueError)


async def test_an_answer_that_is_an_exception_is_returned_not_raised() -> None:
    async def refuse_as_answers(items: Sequence[int]) -> list[ValueError]:
        return [ValueError(f"refused {item}") for item in items]

    writer: GroupWriter[int, ValueError] = GroupWriter("test", refuse_as_answers, max_batch=4)
    answers = await submit_all(writer, range(3))
    assert [str(answer) for answer in answers] == ["refused 0", "refused 1", "refused 2"]
