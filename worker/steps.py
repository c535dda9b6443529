"""Durable steps: `ctx.step(name, fn, ...)` runs `fn` at most once per job to completion.

A step that finishes is journaled in `job_steps` (JOURNAL_STEPS, by the worker's journal
writer: fenced by the run token, written while the code goes on) with its result as JSON, what
it wrote to the log in order (text and progress) and what its model calls cost. A success does
not wait for its journals; any other end of an attempt does (AttemptRunner._settle), so that a
retry finds them. A later attempt loads the journal once, at its first step, and a
journaled step is replayed: its text and progress are written into the new attempt's log (every
attempt's text is whole), its result comes back without `fn` running, and its cost counts in the
result's charge (worker/spend.py), not in this attempt's.

Text a step writes streams live while it is the only step running; while several run at once
(`asyncio.gather` of steps), each keeps its text back and writes it whole when it ends, so the
log holds each step's text in one piece.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import typing
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import asyncpg
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from jobstream import tracing
from jobstream.claims import Claimed
from jobstream.sql import queries
from jobstream.usage import summed
from jobstream.worker.inbox import Inbox, LeaseLost
from jobstream.worker.job_writes import JobWrites
from jobstream.worker.journal_writes import Journal, Journals, ids_of, journal, journal_many
from jobstream.worker.spend import Spend
from jobstream.worker.step_runs import CURRENT, Running, StepRun


@dataclass(frozen=True)
class Journaled:
    result: Any
    output: list[dict[str, Any]]
    cost_usd: Decimal


class Steps:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        spend: Spend,
        inbox: Inbox,
        writes: JobWrites,
        running: Running,
        *,
        threads: Executor | None = None,
        journals: Journals | None = None,
    ) -> None:
        self._pool = pool
        self._held = held
        self._spend = spend
        self._inbox = inbox
        self._writes = writes
        self._running = running
        self._threads = threads
        self._journals = journals  # the worker's group writer; None: a statement of its own
        self._journal: dict[str, Journaled] | None = None
        self._loading: asyncio.Future[dict[str, Journaled]] | None = None
        self._seen: dict[str, int] = {}  # names used so far in this run
        self._writing: list[asyncio.Future[bool]] = []  # journals on their way
        self._ids = ids_of(held)

    async def run(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        if not isinstance(name, str) or not name:
            raise ValueError("ctx.step: the name must be a non-empty string")
        if CURRENT.get() is not None:
            # A step inside a step is part of the outer one, whose journal holds it all.
            return await self._call(fn, args, kwargs)
        key = self._key(name)  # before any await: the order of calls names them
        if not tracing.active():
            return (await self._run(key, fn, args, kwargs))[0]
        attributes = {"jobstream.step.name": name, "jobstream.step.key": key}
        with tracing.child_span("job.step", attributes) as span:
            result, replayed = await self._run(key, fn, args, kwargs)
            span.set_attribute("jobstream.step.replayed", replayed)
            return result

    async def _run(
        self, key: str, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> tuple[Any, bool]:
        """The step's result, and whether it was replayed from the journal."""
        self._landed_now()  # a zombie learns from its last journal, at its next step
        journaled = (await self._load()).get(key)
        if journaled is not None:
            return await self._replay(journaled, fn, args, kwargs), True
        run = StepRun(key)
        self._running.runs.append(run)
        token = CURRENT.set(run)
        try:
            result = await self._call(fn, args, kwargs)
        finally:
            CURRENT.reset(token)
            for text in self._running.end(run):
                self._writes.produce(text)
        self._journal_later(run, to_jsonable_python(result))
        return result, False

    def _key(self, name: str) -> str:
        n = self._seen.get(name, 0)
        self._seen[name] = n + 1
        return name if n == 0 else f"{name}#{n}"

    async def _call(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # A function's code says whether it is a coroutine function: inspect's answer, without
        # its unwrapping (a tenth of a no-op step's time).
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is not None:
            is_async = bool(code.co_flags & inspect.CO_COROUTINE)
        else:
            is_async = inspect.iscoroutinefunction(fn)
        if is_async:
            return await fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        here = contextvars.copy_context()  # the step, for what the thread writes
        result = await loop.run_in_executor(self._threads, lambda: here.run(fn, *args, **kwargs))
        if inspect.isawaitable(result):
            # `lambda: ctx.llm.stream(...)`: a plain function that returns a coroutine.
            return await result
        return result

    async def _load(self) -> dict[str, Journaled]:
        """The job's journal, read once per attempt (steps started at once share the read).
        A first attempt has none to read: no attempt before it journaled anything."""
        if self._journal is not None:
            return self._journal
        if self._held.attempt == 1:
            self._journal = {}
            return self._journal
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._read())
        self._journal = await asyncio.shield(self._loading)
        return self._journal

    async def _read(self) -> dict[str, Journaled]:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(queries.JOB_STEPS, self._held.job_id)
        return {r["step"]: Journaled(r["result"], r["output"], r["cost_usd"]) for r in rows}

    async def _replay(
        self, journaled: Journaled, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        for item in journaled.output:
            if "text" in item:
                self._writes.produce(item["text"])
            else:
                await self._writes.progress(item["progress"])
        self._spend.replayed_usd += journaled.cost_usd
        returns = _return_type(fn, args, kwargs)
        if returns is None:
            return journaled.result
        return TypeAdapter(returns).validate_python(journaled.result)

    def _journal_later(self, run: StepRun, result: Any) -> None:
        """Journal the step while the code goes on: its result is the caller's now, and the
        journal only spares a later attempt the work. A crash before it commits runs the step
        again, as a crash just before the step ended would. A refused journal (the attempt lost
        its job) stops the attempt; after the attempt's end (which is fenced itself) one is
        refused, and changes nothing."""
        entry = journal(self._ids, run.key, result, run.output, summed(run.usages))
        if self._journals is not None:
            landing = self._journals.write(entry)  # a future: no task of its own
        else:
            landing = asyncio.ensure_future(_one(self._pool, entry))
        self._writing.append(landing)

    def left(self) -> None:
        """The handler is done: the journals still on their way are watched by callbacks
        (a refused one stops the attempt if it still runs; an error is logged by nobody)."""
        inbox = self._inbox
        for landing in self._writing:
            landing.add_done_callback(lambda f: _landed(f, inbox))
        self._writing = []

    async def landed(self) -> None:
        """Until the journals on their way are answered (landed or not): an attempt that
        ends without a result waits for them, so that the next attempt finds them."""
        writing, self._writing = self._writing, []
        await asyncio.gather(*writing, return_exceptions=True)

    def _landed_now(self) -> None:
        """Journals answered so far: a refused one stops the attempt (it lost its job)."""
        still = []
        for landing in self._writing:
            if not landing.done():
                still.append(landing)
            else:
                _landed(landing, self._inbox)
        self._writing = still


async def _one(pool: asyncpg.Pool, entry: Journal) -> bool:
    [landed] = await journal_many(pool, [entry])
    return landed


def _landed(landing: asyncio.Future[bool], inbox: Inbox) -> None:
    if landing.cancelled() or landing.exception() is not None:
        return  # not written (the worker stops, the database went away): a retry runs it
    if not landing.result():
        inbox.put_nowait(LeaseLost("a step's journal was refused: the job moved on"))


def _return_type(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """What `fn` says it returns, to rebuild a replayed result (a pydantic model, say). A
    type variable is what the call bound it to: `ctx.llm.parse(Model, ...)` returns a Model."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    returns = hints.get("return")
    if isinstance(returns, TypeVar):
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs).arguments
        except TypeError:
            return None
        for name, hint in hints.items():
            if typing.get_args(hint) == (returns,) and typing.get_origin(hint) is type:
                return bound.get(name)
        return None
    if returns in (None, type(None), Any):
        return None
    return returns
