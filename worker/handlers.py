"""A job's code run as an attempt's body: the built-in `llm` job, or an `@app.job` handler.

The attempt runner (worker/attempt.py) runs the body in its pump task and records how it ended;
the body writes only through the attempt's `Context` (HandlerContext), whose every write goes
through the runner's fenced token log and event appends. Once the attempt has ended (fenced,
cancelled, timed out), the context refuses every call, which is how a handler running on in a
thread learns it is over.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel, ValidationError

from jobstream.app import JobDefinition
from jobstream.claims import Claimed
from jobstream.context import Context, SyncContext
from jobstream.errors import InvalidOutput, PermanentError
from jobstream.worker.job_writes import JobWrites
from jobstream.worker.llm_calls import LLMCalls, validation_errors
from jobstream.worker.previous import Previous
from jobstream.worker.steps import Steps

# A progress message longer than this is cut: it is a status line, not a log.
PROGRESS_MESSAGE_MAX_CHARS = 1000


class HandlerContext(Context):
    def __init__(
        self,
        held: Claimed,
        llm: LLMCalls,
        writes: JobWrites,
        steps: Steps,
        previous: Previous,
        *,
        threads: Executor | None = None,
    ) -> None:
        self.job_id = held.job_id
        self.tenant_id = held.tenant_id
        self.attempt = held.attempt
        self.llm = llm
        self.cancelled = asyncio.Event()
        self._writes = writes
        self._steps = steps
        self._previous = previous
        self.threads = threads  # where plain `def` handlers and steps run
        self.in_thread: SyncContext | None = None  # a plain handler's context, while it runs

    @property
    def previous_failure(self) -> dict[str, Any] | None:
        return self._previous.failure

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._writes.check_open()
        return await self._steps.run(name, fn, args, kwargs)

    def end(self) -> None:
        """The attempt is over: a plain handler's call under way on the loop is cancelled (it
        raises in its thread), and the context lets go of it."""
        if self.in_thread is not None:
            self.in_thread.cancel_calls()
            self.in_thread = None

    @property
    def produced_text(self) -> bool:
        """The handler wrote text (by emit or a model call)."""
        return self._writes.produced_text

    def steps_left(self) -> None:
        self._steps.left()

    async def steps_landed(self) -> None:
        await self._steps.landed()

    async def look_back(self) -> None:
        """A retried attempt reads how the last one ended (previous_failure) before it runs."""
        await self._previous.load()

    async def emit(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"ctx.emit takes a str, not {type(text).__name__}")
        self._writes.check_open()
        if text:
            self._writes.produce(text.replace("\x00", "\ufffd") if "\x00" in text else text)

    async def progress(self, fraction: float, message: str | None = None) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError("ctx.progress: fraction must be a number from 0 to 1")
        if math.isnan(fraction) or not 0 <= fraction <= 1:
            raise ValueError(f"ctx.progress: fraction must be from 0 to 1, not {fraction}")
        if message is not None and not isinstance(message, str):
            raise TypeError("ctx.progress: message must be a str or None")
        self._writes.check_open()
        if message is not None:
            message = message[:PROGRESS_MESSAGE_MAX_CHARS].replace("\x00", "\ufffd")
        await self._writes.progress({"fraction": float(fraction), "message": message})


async def run_definition(job: JobDefinition, held: Claimed, ctx: HandlerContext) -> object:
    """Run `job`'s handler on the attempt's input; its validated output (None without an
    output model)."""
    try:
        value = job.parse_input(held.spec.input)
    except ValidationError as exc:
        # Validated at create: only a change of the model since then gets here, and no retry
        # of this code would fit it.
        raise PermanentError(f"the job's input no longer fits its model: {exc}") from exc
    await ctx.look_back()
    result = await _handled(job, value, ctx)
    # A success does not wait for its steps' journals (a round trip more for every job with
    # steps): they land after it. Any other end waits for them (AttemptRunner._settle), so
    # that the retry finds them.
    ctx.steps_left()
    if job.output is None:
        # The result is the text. A handler that wrote none and returned a string has that
        # string as its text (`return "done"`); after text was emitted, its `return` of the
        # same text (`return await ctx.llm.stream(...)`) adds nothing.
        if isinstance(result, str) and result and not ctx.produced_text:
            await ctx.emit(result)
        return None
    try:
        return job.checked_output(result)
    except ValidationError as exc:
        raise InvalidOutput(
            f"the job's result does not fit its output model: {validation_errors(exc)}"
        ) from exc


async def _handled(job: JobDefinition, value: BaseModel, ctx: HandlerContext) -> Any:
    """The handler's return value: awaited on the loop, or a plain function's from a thread."""
    if job.is_async:
        return await job.handler(value, ctx)
    loop = asyncio.get_running_loop()
    ctx.in_thread = sync = SyncContext(ctx, loop)
    here = contextvars.copy_context()
    return await loop.run_in_executor(ctx.threads, here.run, job.handler, value, sync)
