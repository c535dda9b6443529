"""The Anthropic provider: one streamed Messages call per attempt, through the official SDK.

The SDK's own retries are off (`max_retries=0`): jobstream retries, and records every try as an
attempt with its cost. Its raw stream events are read here: text deltas go to the log, usage
comes from `message_start` and `message_delta` (whose counts are cumulative: the last one
wins), and the stop reason becomes the request's Finish (`max_tokens` is `length`, `refusal`
stays `refusal`), which `ctx.llm.parse` turns into output_truncated and refused. Every failure
leaves as a ProviderError from `classify.from_error_type`, by the error body's `type` as well
as its status; the API key never appears in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import Any, Final

import anthropic
import httpx2
import structlog

from jobstream.errors import ProviderError
from jobstream.jobspec import Message, chat
from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker.providers import classify
from jobstream.worker.providers.base import Prompt, ProviderRequest, SendMark, StreamItem, TextDelta

log = structlog.get_logger(__name__)

_DETAIL_LIMIT: Final = 300
# Stop reasons in the vocabulary of Finish (worker/providers/base.py); any other is a `stop`.
_FINISH: Final = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
# Transport errors raised before any byte of the request is written.
_BEFORE_SEND: Final = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})


def estimate_tokens(text: str) -> int:
    """About four characters a token: for reservations, and attempts that reported no usage."""
    return math.ceil(len(text) / 4)


def _input_tokens(request: Prompt) -> int:
    conversation = chat(request.prompt, request.messages, request.instructions)
    return estimate_tokens("".join(message["content"] for message in conversation))


class _SendTrace:
    """httpcore2's `trace` extension says when the request starts going out: the line between
    "safe to retry" and "the provider may be working on it"."""

    def __init__(self, mark: SendMark) -> None:
        self.request_sent = False
        self._mark = mark

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("send_request_headers.started"):
            self.request_sent = True
            self._mark.mark()


# The trace of the call the running task is making: the SDK builds the HTTP request itself, so
# its client adds the extension on the way out.
_TRACE: ContextVar[_SendTrace | None] = ContextVar("anthropic_send_trace", default=None)


class _TracingClient(anthropic.DefaultAsyncHttpxClient):
    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        trace = _TRACE.get()
        if trace is not None:
            request.extensions["trace"] = trace
        return await super().send(request, **kwargs)


@dataclass
class _Counts:
    """The usage a stream reported so far (message_delta's counts are cumulative)."""

    input: int = 0  # uncached input
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    def update(self, usage: Any) -> None:
        for name, field in (
            ("input_tokens", "input"),
            ("output_tokens", "output"),
            ("cache_creation_input_tokens", "cache_write"),
            ("cache_read_input_tokens", "cache_read"),
        ):
            value = getattr(usage, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self, field, value)


class AnthropicProvider:
    """`stream()` one message; `aclose()` the SDK's client if it was made."""

    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        self._base_url = settings.anthropic_base_url.rstrip("/")
        self._api_key = settings.anthropic_api_key
        self._model = settings.anthropic_model
        self._connect_timeout_s = settings.anthropic_connect_timeout_s
        self._first_token_timeout_s = settings.anthropic_first_token_timeout_s
        self._idle_timeout_s = settings.anthropic_idle_timeout_s
        # Cache reads and writes have prices of their own (the catalogue's [anthropic] section).
        self._prices = settings.prices
        # Made at the first request: the server builds this provider only to price jobs.
        self._client: anthropic.AsyncAnthropic | None = None

    def __repr__(self) -> str:
        return f"AnthropicProvider(url={self._base_url!r}, model={self._model!r})"

    def _sdk(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            # Reads are timed by us (first token, idle); the SDK times connecting and writing.
            timeout = httpx2.Timeout(
                connect=self._connect_timeout_s,
                read=None,
                write=self._idle_timeout_s,
                pool=self._connect_timeout_s,
            )
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                max_retries=0,  # jobstream retries, and records each try
                timeout=timeout,
                http_client=_TracingClient(timeout=timeout),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> AnthropicProvider:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def price(self, request: Prompt) -> Price:
        return self._prices.price_of(self.name, request.model or self._model)

    def cost(
        self,
        request: Prompt,
        input_tokens: int,
        output_tokens: int,
        cache_write: int = 0,
        cache_read: int = 0,
    ) -> Decimal:
        """The price of a call: `input_tokens` uncached, the cache's tokens priced apart."""
        price = self.price(request)
        return price.cost(input_tokens, output_tokens, cache_read, cache_write)

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return self.cost(request, _input_tokens(request), output_tokens)

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        system, messages = _split_system(request.chat())
        params: dict[str, Any] = {
            **request.sampling,
            "model": request.model or self._model,
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
        if system:
            params["system"] = system
        if request.json_schema is not None:
            # Structured outputs (the SDK's `output_config.format`): the answer is the JSON text.
            params["output_config"] = {
                "format": {"type": "json_schema", "schema": request.json_schema["schema"]}
            }
        return params

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[StreamItem, None]:
        if not self._api_key:
            raise self._failed(
                ProviderError(
                    "permanent",
                    "JOBSTREAM_ANTHROPIC_API_KEY is not set on this worker",
                    request_sent=False,
                )
            )
        trace = _SendTrace(request.send_mark)
        params = self._params(request)
        log.debug("anthropic.request", model=params["model"], attempt=request.attempt)
        loop = asyncio.get_running_loop()
        # Absolute: neither response headers nor message_start extend it.
        first_token_deadline = loop.time() + self._first_token_timeout_s
        token = _TRACE.set(trace)
        try:
            async with asyncio.timeout_at(first_token_deadline):
                events = await self._sdk().messages.create(**params, stream=True)
        except TimeoutError:
            raise self._failed(
                classify.from_stream_fault("first_token_timeout", request_sent=trace.request_sent)
            ) from None
        except anthropic.APIStatusError as exc:
            raise self._failed(self._status_error(exc, in_stream=False)) from None
        except anthropic.APIConnectionError as exc:
            raise self._failed(_connection_error(exc, trace.request_sent)) from exc
        finally:
            _TRACE.reset(token)
        # From here on the stream is ours to close, however the consumer leaves.
        try:
            # aclosing: leaving early must close the inner generator now, not at GC time.
            async with aclosing(self._items(events, request, first_token_deadline)) as items:
                async for item in items:
                    yield item
        finally:
            await events.close()

    async def _items(
        self,
        events: anthropic.AsyncStream[Any],
        request: ProviderRequest,
        first_token_deadline: float,
    ) -> AsyncGenerator[StreamItem, None]:
        loop = asyncio.get_running_loop()
        iterator = events.__aiter__()
        counts = _Counts()
        text_parts: list[str] = []
        stopped = False
        got_text = False
        while True:
            deadline = loop.time() + self._idle_timeout_s if got_text else first_token_deadline
            try:
                async with asyncio.timeout_at(deadline):
                    event = await anext(iterator)
            except StopAsyncIteration:
                break
            except TimeoutError:
                fault: classify.StreamFault = "idle_timeout" if got_text else "first_token_timeout"
                raise self._failed(classify.from_stream_fault(fault)) from None
            except anthropic.APIStatusError as exc:
                # An `error` event: the SDK raises it with the stream's own status, 200.
                raise self._failed(self._status_error(exc, in_stream=True)) from None
            except (httpx2.TransportError, anthropic.APIConnectionError) as exc:
                raise self._failed(_connection_error(exc, request_sent=True)) from exc
            except ValueError as exc:  # an event whose data is not JSON
                raise self._failed(
                    classify.from_stream_fault("malformed_chunk", detail=str(exc))
                ) from None
            kind = getattr(event, "type", None)
            if kind == "message_start":
                counts.update(event.message.usage)
            elif kind == "content_block_delta":
                delta = event.delta
                if getattr(delta, "type", None) == "text_delta" and delta.text:
                    got_text = True
                    text_parts.append(delta.text)
                    yield TextDelta(delta.text)
            elif kind == "message_delta":
                if event.usage is not None:
                    counts.update(event.usage)
                reason = event.delta.stop_reason
                if reason is not None:
                    request.finish.reason = _FINISH.get(reason, "stop")
            elif kind == "message_stop":
                stopped = True
                break
        if not stopped:
            # The body ended without message_stop: we cannot tell what was produced.
            raise self._failed(classify.from_stream_fault("ended_early"))
        if request.finish.reason == "refusal":
            said = "".join(text_parts)
            request.finish.refusal = said or "the model refused (stop_reason refusal)"
        yield Usage(
            counts.input + counts.cache_write + counts.cache_read,
            counts.output,
            self.cost(request, counts.input, counts.output, counts.cache_write, counts.cache_read),
            True,
            cache_read_tokens=counts.cache_read,
            cache_write_tokens=counts.cache_write,
        )

    def _status_error(self, exc: anthropic.APIStatusError, *, in_stream: bool) -> ProviderError:
        detail = exc.api_message if isinstance(exc.api_message, str) else ""
        error_type = exc.type if isinstance(exc.type, str) else None
        return classify.from_error_type(
            exc.status_code,
            error_type,
            exc.response.headers,
            detail=" ".join(detail.split())[:_DETAIL_LIMIT],
            in_stream=in_stream,
        )

    def _redact(self, text: str) -> str:
        # Some servers echo the key they rejected.
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    def _failed(self, error: ProviderError) -> ProviderError:
        redacted = ProviderError(
            error.kind,
            self._redact(error.message),
            retry_after_s=error.retry_after_s,
            status_code=error.status_code,
            request_sent=error.request_sent,
            refused=error.refused,
            pause_provider=error.pause_provider,
        )
        log.info(
            "anthropic.failed",
            kind=redacted.kind,
            status_code=redacted.status_code,
            request_sent=redacted.request_sent,
            retry_after_s=redacted.retry_after_s,
            error=redacted.message,
        )
        return redacted


def _connection_error(exc: Exception, request_sent: bool) -> ProviderError:
    """A connection that failed: safe to retry only if nothing of the request left us."""
    cause = exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc
    sent = request_sent or not isinstance(cause, _BEFORE_SEND)
    described = cause if cause is not None else exc
    return classify.from_connection(
        f"{type(described).__name__}: {described}" if str(described) else type(described).__name__,
        request_sent=sent,
    )


def _split_system(conversation: list[Message]) -> tuple[str, list[dict[str, str]]]:
    """Anthropic takes the system prompt apart from the turns, which are user or assistant."""
    system = [m["content"] for m in conversation if m["role"] in _SYSTEM_ROLES]
    turns = [
        {"role": m["role"], "content": m["content"]}
        for m in conversation
        if m["role"] not in _SYSTEM_ROLES
    ]
    return "\n\n".join(system), turns
