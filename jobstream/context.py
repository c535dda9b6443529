"""What a job's handler sees: `jobstream.Context`, the attempt it runs in.

The worker implements it over its attempt machinery (worker/handlers.py): every write goes
through the attempt's token log, lease and fencing, exactly as the built-in job's do, so a
handler whose attempt lost its job can change nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from jobstream.jobspec import Message

M = TypeVar("M", bound=BaseModel)


class LLM(ABC):
    """`ctx.llm`: calls to the deployment's providers, streamed into the job's text."""

    @abstractmethod
    async def stream(
        self,
        prompt: str | None = None,
        *,
        messages: list[Message] | None = None,
        model: str | None = None,
        provider: str | None = None,
        max_tokens: int = 512,
        instructions: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        simulate: dict[str, Any] | None = None,
    ) -> str:
        """Call a model and return its whole answer; each delta is emitted as it comes.

        Give `prompt` or `messages`. The call's usage and cost land in the attempt's record; a
        failure raises `jobstream.errors.ProviderError` with its kind (rate limited, transient,
        permanent, unknown outcome), which decides the job's retry when the handler lets it
        propagate.
        """

    @abstractmethod
    async def parse(
        self,
        model: type[M],
        prompt: str | None = None,
        *,
        messages: list[Message] | None = None,
        llm_model: str | None = None,
        provider: str | None = None,
        max_tokens: int = 1024,
        instructions: str | None = None,
        temperature: float | None = None,
        simulate: dict[str, Any] | None = None,
    ) -> M:
        """Ask for an answer in `model`'s shape (structured output: the model's JSON Schema,
        strict), stream its JSON into the job's text as it comes, and return it validated.

        An answer that does not validate raises `InvalidOutput` (the job is asked again, within
        its invalid_output_retries, and the next try appends the errors to the request by
        itself); one cut off at `max_tokens` raises `OutputTruncated` (one more try with the
        limit doubled); a refusal raises `Refused` (final).
        """


class Context(ABC):
    """The attempt a handler runs in.

    await ctx.emit("partial text")            # appended to the job's text, streamed
    await ctx.progress(0.5, "halfway")        # a `progress` event
    answer = await ctx.llm.stream(prompt=...) # a model call, streamed into the text
    if ctx.cancelled.is_set(): ...            # a cancel was asked (the task is also cancelled)
    """

    job_id: uuid.UUID
    tenant_id: str
    attempt: int
    llm: LLM
    # Set when a cancel of the job reaches the worker: the handler's task is cancelled at its
    # next await as well, so only a long stretch of code without one needs to look.
    cancelled: asyncio.Event

    @abstractmethod
    async def emit(self, text: str) -> None:
        """Append `text` to the attempt's text (coalesced into `token` events)."""

    @abstractmethod
    async def progress(self, fraction: float, message: str | None = None) -> None:
        """Write a `progress` event: `fraction` from 0 to 1, and an optional message."""

    @abstractmethod
    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` (async, or sync in a thread) at most once per job to
        completion: its result (JSON, or a pydantic model), the text and progress it wrote and
        the cost of its model calls are journaled, fenced by the attempt; a later attempt gets
        the result back without running `fn`, and its text and progress written again.

        Names are unique within a run: the same name again (a loop) is `name#1`, `name#2`...
        A step that raises is not journaled. Steps may run at once (`asyncio.gather`); a step
        inside a step runs as part of the outer one.
        """

    @property
    @abstractmethod
    def previous_failure(self) -> dict[str, Any] | None:
        """How the attempt before this one failed, if it did: `class`, `message` (for an
        invalid output, the validation errors) and `text` (what it wrote), for a handler that
        asks again differently. None on a first attempt."""


class SyncLLM:
    """`ctx.llm` for a handler that runs in a thread: the same calls, made on the worker's
    loop, waited for here."""

    def __init__(self, sync: SyncContext) -> None:
        self._sync = sync

    def stream(self, prompt: str | None = None, **options: Any) -> str:
        result: str = self._sync.call(self._sync.context.llm.stream, prompt, **options)
        return result

    def parse(self, model: type[M], prompt: str | None = None, **options: Any) -> M:
        result: M = self._sync.call(self._sync.context.llm.parse, model, prompt, **options)
        return result


class SyncContext:
    """The context of a plain `def` handler, which runs in a thread: each method is a plain
    call that runs on the worker's loop and returns once it is done there. A cancel, or the
    attempt's end, cancels the call under way (it raises in the thread) and every later call
    raises: a thread cannot be interrupted, so a long handler also looks at `cancelled`."""

    def __init__(self, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        self.context = ctx
        self._loop = loop
        self._calls: set[concurrent.futures.Future[Any]] = set()
        self.job_id = ctx.job_id
        self.tenant_id = ctx.tenant_id
        self.attempt = ctx.attempt
        self.llm = SyncLLM(self)

    @property
    def cancelled(self) -> bool:
        """True once a cancel reached the worker."""
        return self.context.cancelled.is_set()

    @property
    def previous_failure(self) -> dict[str, Any] | None:
        return self.context.previous_failure

    def emit(self, text: str) -> None:
        self.call(self.context.emit, text)

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.call(self.context.progress, fraction, message)

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.call(self.context.step, name, fn, *args, **kwargs)

    def call(self, method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Run `method` on the loop, in this thread's context (a step's, say), and wait."""
        here = contextvars.copy_context()

        async def inside() -> Any:
            for var, value in here.items():
                var.set(value)  # the task's own copy: the loop's context is untouched
            return await method(*args, **kwargs)

        future = asyncio.run_coroutine_threadsafe(inside(), self._loop)
        self._calls.add(future)
        try:
            return future.result()
        finally:
            self._calls.discard(future)

    def cancel_calls(self) -> None:
        """The attempt ended: stop what the thread is waiting for (its model call, say)."""
        for future in list(self._calls):
            future.cancel()
