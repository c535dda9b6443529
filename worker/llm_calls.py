"""`ctx.llm`: a job's model calls, made through the worker's providers.

Each call streams its deltas into the attempt's text as the built-in job's stream does, counts
in the attempt's Spend (worker/spend.py), and closes its request when the handler is cancelled
(the stream's `aclose`, in `finally`). A job with `max_cost_usd` has each call checked against
what the job has spent so far plus the call's most expensive answer, before it is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import structlog

from jobstream.context import LLM
from jobstream.errors import BudgetRefused, ProviderError
from jobstream.jobspec import Message, prompt_of
from jobstream.usage import Usage
from jobstream.worker.job_writes import JobWrites
from jobstream.worker.providers.base import Provider, ProviderRequest
from jobstream.worker.spend import Spend

log = structlog.get_logger("worker.attempt")


class LLMCalls(LLM):
    def __init__(
        self,
        providers: Mapping[str, Provider],
        *,
        default_provider: str,
        attempt: int,
        spend: Spend,
        writes: JobWrites,
        max_cost_usd: float | None = None,
    ) -> None:
        self._providers = providers
        self._default = default_provider
        self._attempt = attempt
        self._spend = spend
        self._writes = writes
        self._cap = Decimal(str(max_cost_usd)) if max_cost_usd is not None else None
        self._earlier: Decimal | None = None  # read once, at the first call that needs it

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
        self._writes.check_open()
        name = provider or self._default
        chosen = self._providers.get(name)
        if chosen is None:
            known = ", ".join(sorted(self._providers))
            raise ProviderError(
                "permanent",
                f"provider {name!r} is not configured on this worker (it has {known})",
                request_sent=False,
            )
        if (prompt is None) == (messages is None):
            raise ValueError("ctx.llm.stream takes prompt or messages, one of the two")
        sampling = {"temperature": temperature, "top_p": top_p}
        request = ProviderRequest(
            prompt=prompt if prompt is not None else prompt_of(messages or []),
            model=model,
            max_tokens=max_tokens,
            attempt=self._attempt,
            simulate=dict(simulate or {}),
            messages=messages,
            instructions=instructions,
            sampling={k: v for k, v in sampling.items() if v is not None},
        )
        await self._check_budget(chosen, request)
        return await self.run(name, chosen, request)

    async def run(self, name: str, provider: Provider, request: ProviderRequest) -> str:
        """Stream `request` into the attempt's text; its whole answer."""
        call = self._spend.begin(provider, request)
        parts: list[str] = []
        stream = provider.stream(request)
        try:
            async for item in stream:
                if isinstance(item, Usage):
                    call.usage = item
                    continue
                text = item.text
                if "\x00" in text:
                    # PostgreSQL's jsonb cannot hold U+0000: every flush of this text failed and
                    # the job was retried to death, paying the provider each time. Replaced
                    # once, here, so that the log and the result agree.
                    text = text.replace("\x00", "\ufffd")
                call.deltas += 1
                parts.append(text)
                self._writes.produce(text)
        except ProviderError as exc:
            exc.provider = name
            raise
        finally:
            await close_stream(stream)
        self._spend.end(call)
        return "".join(parts)

    async def _check_budget(self, provider: Provider, request: ProviderRequest) -> None:
        if self._cap is None:
            return
        if self._earlier is None:
            self._earlier = await self._writes.earlier_cost()
        worst = provider.estimate_cost(request, request.max_tokens)
        spent = self._earlier + self._spend.cost_usd
        if spent + worst > self._cap:
            raise BudgetRefused(
                f"this call could cost up to ${worst:.6f}; the job has spent ${spent:.6f} of "
                f"its max_cost_usd ${self._cap}"
            )


async def close_stream(stream: object) -> None:
    """Close a provider's stream, which closes its request (the Provider protocol)."""
    aclose: Callable[[], Awaitable[object]] | None = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception:
        log.warning("provider_stream_close_failed", exc_info=True)
