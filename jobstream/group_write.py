"""Group commit: many tasks' writes, sent together as one statement and one commit.

A task hands over its item and waits for its own answer; one writer task sends whatever arrived
meanwhile in one statement. A worker's two hot writes work so (worker/completions.py,
worker/token_writes.py), and so do a server's single creates (server/create_writer.py): alone,
each item would be a transaction, and commits (each a WAL flush, and with a NOTIFY a
cluster-wide lock) are what PostgreSQL runs out of first.

The statements answer per item (fenced per attempt, refused per create), so an item refused
learns it from its own answer and the others land. A statement the database refuses is retried
item by item, so that only the item at fault sees the error; a lost connection fails the whole
batch (each write is then in doubt, and every caller's fence makes its retry safe).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import structlog

from jobstream import db
from jobstream.event_loop import running_loop

log = structlog.get_logger(__name__)

Item = TypeVar("Item")
Answer = TypeVar("Answer")
AnswerIn = TypeVar("AnswerIn", contravariant=True)


class Reply(Protocol[AnswerIn]):
    """Where an item's answer goes: an asyncio.Future, or an object that takes it as a future
    would, at once (worker/token_pull.py). A future and its callback cost 2.8 µs an item, a
    token write of 1,000 streams a thousand of them."""

    def done(self) -> bool: ...

    def set_result(self, result: AnswerIn, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def cancel(self, msg: Any | None = None) -> bool: ...


class GroupWriter(Generic[Item, Answer]):
    """Items written `max_batch` at a time by `write_many`, which answers each in order.

    `in_flight` batches may be under way at once, each on its own connection. `min_interval_s`
    spaces the writes: a write that took less waits out the rest, so that what arrives meanwhile
    joins the next statement instead of costing a commit of its own. `collect`, called as each
    write is put together, may add items of its own (submit_nowait): what the writer takes from
    its sources instead of waiting for them to hand it over (worker/token_writes.py).
    """

    def __init__(
        self,
        name: str,
        write_many: Callable[[Sequence[Item]], Awaitable[Sequence[Answer]]],
        *,
        max_batch: int,
        in_flight: int = 1,
        min_interval_s: float = 0.0,
        collect: Callable[[], None] | None = None,
    ) -> None:
        self._name = name
        self._write_many = write_many
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._min_interval_s = min_interval_s
        self._collect = collect
        self._items: list[Item] = []
        self._waiting: list[Reply[Answer]] = []
        self._arrived = asyncio.Event()

    async def submit(self, item: Item) -> Answer:
        """Write `item` with the others of its turn; its answer, or the database's error."""
        return await self.submit_nowait(item)

    def submit_nowait(self, item: Item) -> asyncio.Future[Answer]:
        """Write `item` with the others of its turn: the future of its answer (or error)."""
        answer: asyncio.Future[Answer] = running_loop().create_future()
        self.submit_to(item, answer)
        return answer

    def submit_to(self, item: Item, reply: Reply[Answer]) -> None:
        """Write `item` with the others of its turn; its answer (or error) goes to `reply`, which
        is cancelled if the write is cut short."""
        self._items.append(item)
        self._waiting.append(reply)
        self._arrived.set()

    def wake(self) -> None:
        """Put a write together now: `collect` has something."""
        self._arrived.set()

    async def run(self) -> None:
        """The writer: until cancelled, write what is pending."""
        loop = asyncio.get_running_loop()
        writes: set[asyncio.Task[None]] = set()
        room = asyncio.Semaphore(self._in_flight)
        try:
            while True:
                await self._arrived.wait()
                await room.acquire()
                if self._collect is not None:
                    self._collect()
                n = self._max_batch
                items, self._items = self._items[:n], self._items[n:]
                waiting, self._waiting = self._waiting[:n], self._waiting[n:]
                if not self._items:
                    self._arrived.clear()
                if not items:
                    room.release()
                    continue
                started = loop.time()
                write = asyncio.create_task(
                    self._write(items, waiting), name=f"{self._name}:{len(items)}"
                )
                writes.add(write)
                write.add_done_callback(writes.discard)
                write.add_done_callback(lambda _: room.release())
                if self._min_interval_s > 0:
                    await asyncio.wait({write})
                    rest = started + self._min_interval_s - loop.time()
                    if rest > 0:
                        await asyncio.sleep(rest)
        finally:
            for write in writes:
                write.cancel()
            await asyncio.gather(*writes, return_exceptions=True)
            # Nobody writes what is still pending: its callers must not wait for ever.
            for future in self._waiting:
                future.cancel()
            self._items.clear()
            self._waiting.clear()

    async def _write(self, items: list[Item], waiting: list[Reply[Answer]]) -> None:
        try:
            await self._answer(items, waiting)
        finally:
            # Cut short (the writer stops at shutdown): the outcome is unknown to the callers
            # still waiting, who must not wait for ever.
            for future in waiting:
                if not future.done():
                    future.cancel()

    async def _answer(self, items: list[Item], waiting: list[Reply[Answer]]) -> None:
        try:
            answers = await self._write_many(items)
        except db.DISCONNECTS as exc:
            for future in waiting:
                _fail(future, exc)
            return
        except Exception:
            log.warning("group_write_refused", writer=self._name, size=len(items), exc_info=True)
            for item, future in zip(items, waiting, strict=True):
                try:
                    (answer,) = await self._write_many([item])
                except Exception as exc:
                    _fail(future, exc)
                else:
                    _answer(future, answer)
            return
        for future, answer in zip(waiting, answers, strict=True):
            _answer(future, answer)


def _answer(future: Reply[Answer], answer: Answer) -> None:
    """An answer is a value, even one that is an exception (a create's refusal is returned)."""
    if not future.done():  # else its caller was cancelled while it waited
        future.set_result(answer)


def _fail(future: Reply[Answer], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
