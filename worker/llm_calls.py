"""`ctx.llm`: a job's model calls, made through the worker's providers.

Each call streams its deltas into the attempt's text as the built-in job's stream does, counts
in the attempt's Spend (worker/spend.py), and closes its request when the handler is cancelled
(the stream's `aclose`, in `finally`). A job with `max_cost_usd` has each call checked against
what the job has spent so far plus the call's most expensive answer, before it is sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import structlog
from pydantic import ValidationError

from jobstream import tracing
from jobstream.context import LLM, M
from jobstream.errors import (
    BudgetRefused,
    InvalidOutput,
    OutputTruncated,
    ProviderError,
    Refused,
)
from jobstream.jobspec import Message, prompt_of
from jobstream.usage import Usage
from jobstream.worker.job_writes import JobWrites
from jobstream.worker.previous import Previous
from jobstream.worker.providers.base import Provider, ProviderRequest
from jobstream.worker.spend import Spend
from jobstream.worker.step_runs import CURRENT

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
        previous: Previous,
        max_cost_usd: float | None = None,
    ) -> None:
        self._providers = providers
        self._default = default_provider
        self._attempt = attempt
        self._spend = spend
        self._writes = writes
        self._previous = previous
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
        name, chosen = self._provider(provider)
        request = self._request(
            prompt, messages, model, max_tokens, instructions, temperature, top_p, simulate
        )
        await self._check_budget(chosen, request)
        return await self.run(name, chosen, request)

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
        name, chosen = self._provider(provider)
        conversation = (
            messages if messages is not None else [{"role": "user", "content": prompt or ""}]
        )
        failed = self._previous.failure
        answer = failed.get("answer") or failed.get("text") if failed is not None else None
        if failed is not None and failed["class"] == "invalid_output" and answer:
            # Asked again, with what was wrong with the last answer (once per budget unit).
            conversation = [
                *conversation,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"That answer does not fit the schema: "
                 f"{failed['message']}. Answer again with only JSON that fits it."},
            ]  # fmt: skip
        elif failed is not None and failed["class"] == "output_truncated":
            max_tokens *= 2  # the one retry a truncated answer gets
        request = self._request(
            None, conversation, llm_model, max_tokens, instructions, temperature, None, simulate
        )
        request = dataclasses.replace(
            request,
            json_schema={
                "name": model.__name__,
                "schema": strict_schema(model.model_json_schema()),
                "strict": True,
            },
        )
        await self._check_budget(chosen, request)
        text = await self.run(name, chosen, request)
        finish = request.finish
        if finish.refusal or finish.reason in ("content_filter", "refusal"):
            raise Refused(finish.refusal or f"the model stopped: {finish.reason}")
        if finish.reason == "length":
            raise OutputTruncated(f"the answer reached max_tokens={max_tokens} before its end")
        try:
            return model.model_validate_json(text)
        except ValidationError as exc:
            raise InvalidOutput(
                f"the answer does not fit {model.__name__}: {validation_errors(exc)}", text
            ) from exc

    def _provider(self, provider: str | None) -> tuple[str, Provider]:
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
        return name, chosen

    def _request(
        self,
        prompt: str | None,
        messages: list[Message] | None,
        model: str | None,
        max_tokens: int,
        instructions: str | None,
        temperature: float | None,
        top_p: float | None,
        simulate: dict[str, Any] | None,
    ) -> ProviderRequest:
        if (prompt is None) == (messages is None):
            raise ValueError("ctx.llm takes prompt or messages, one of the two")
        sampling = {"temperature": temperature, "top_p": top_p}
        return ProviderRequest(
            prompt=prompt if prompt is not None else prompt_of(messages or []),
            model=model,
            max_tokens=max_tokens,
            attempt=self._attempt,
            simulate=dict(simulate or {}),
            messages=messages,
            instructions=instructions,
            sampling={k: v for k, v in sampling.items() if v is not None},
        )

    async def run(self, name: str, provider: Provider, request: ProviderRequest) -> str:
        """Stream `request` into the attempt's text; its whole answer."""
        if not tracing.active():
            return (await self._run(name, provider, request))[0]
        attributes: dict[str, str | int | bool] = {
            "gen_ai.provider.name": name,
            "gen_ai.request.model": request.model or "",
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        with tracing.child_span("llm.call", attributes) as span:
            try:
                answer, usage = await self._run(name, provider, request)
            except ProviderError as exc:
                # The kind decides the job's fate (retry, fail, unknown): what a reader of the
                # trace asks first.
                span.set_attribute("jobstream.error.kind", str(exc.kind))
                raise
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            span.set_attribute("jobstream.cost_usd", str(usage.cost_usd))
            return answer

    async def _run(
        self, name: str, provider: Provider, request: ProviderRequest
    ) -> tuple[str, Usage]:
        """The call's whole answer and what it used."""
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
        usage = self._spend.end(call)
        step = CURRENT.get()
        if step is not None:
            step.usages.append(usage)  # journaled with the step
        return "".join(parts), usage

    async def _check_budget(self, provider: Provider, request: ProviderRequest) -> None:
        if self._cap is None:
            return
        if self._earlier is None:
            self._earlier = await self._writes.earlier_cost()
        # Calls still open count at their worst: calls made at once cannot pass the cap together.
        worst = provider.estimate_cost(request, request.max_tokens)
        spent = self._earlier + self._spend.committed_usd()
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


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON Schema as strict structured output takes it: every object closed
    (`additionalProperties: false`) with every property required, and no defaults."""

    def close(node: Any) -> Any:
        if isinstance(node, list):
            return [close(item) for item in node]
        if not isinstance(node, dict):
            return node
        closed = {key: close(value) for key, value in node.items() if key != "default"}
        if closed.get("type") == "object" and "properties" in closed:
            closed["additionalProperties"] = False
            closed["required"] = list(closed["properties"])
        return closed

    result: dict[str, Any] = close(schema)
    return result


def validation_errors(exc: ValidationError) -> str:
    """pydantic's errors in one line each: where, and what is wrong."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(the answer)"
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)
