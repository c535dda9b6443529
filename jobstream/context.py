"""What a job's handler sees: `jobstream.Context`, the attempt it runs in.

The worker implements it over its attempt machinery (worker/handlers.py): every write goes
through the attempt's token log, lease and fencing, exactly as the built-in job's do, so a
handler whose attempt lost its job can change nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from typing import Any

from jobstream.jobspec import Message


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


class SyncLLM:
    """`ctx.llm` for a handler that runs in a thread: the same calls, made on the worker's
    loop, waited for here."""

    def __init__(self, llm: LLM, loop: asyncio.AbstractEventLoop) -> None:
        self._llm = llm
        self._loop = loop

    def stream(self, prompt: str | None = None, **options: Any) -> str:
        call = self._llm.stream(prompt, **options)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()


class SyncContext:
    """The context of a plain `def` handler, which runs in a thread: each method is a plain
    call that runs on the worker's loop and returns once it is done there."""

    def __init__(self, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        self._ctx = ctx
        self._loop = loop
        self.job_id = ctx.job_id
        self.tenant_id = ctx.tenant_id
        self.attempt = ctx.attempt
        self.llm = SyncLLM(ctx.llm, loop)

    @property
    def cancelled(self) -> bool:
        """True once a cancel reached the worker: a thread cannot be interrupted, so a long
        handler looks here between pieces of work (every method also raises once it is)."""
        return self._ctx.cancelled.is_set()

    def emit(self, text: str) -> None:
        asyncio.run_coroutine_threadsafe(self._ctx.emit(text), self._loop).result()

    def progress(self, fraction: float, message: str | None = None) -> None:
        call = self._ctx.progress(fraction, message)
        asyncio.run_coroutine_threadsafe(call, self._loop).result()
