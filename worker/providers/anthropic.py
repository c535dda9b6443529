"""The Anthropic provider: one streamed Messages call per attempt, through the official SDK.

The SDK builds and sends the request (auth, version headers, the body), with its own retries off
(`max_retries=0`: jobstream retries, and records every try as an attempt with its cost), and
raises an error status as its APIStatusError. The stream's body is read here, as raw SSE bytes
parsed with orjson (worker/providers/sse_bytes.py), not as the SDK's typed events, whose
pydantic models cost more CPU a token than the whole of the OpenAI path (docs/providers.md).
tests/integration/test_anthropic_provider.py holds the fake's stream to what the SDK's own
typed parser accepts. The events: text deltas go to the log, usage
comes from `message_start` and `message_delta` (whose counts are cumulative: the last one
wins), and the stop reason becomes the request's Finish (`max_tokens` is `length`, `refusal`
stays `refusal`), which `ctx.llm.parse` turns into output_truncated and refused. Every failure
leaves as a ProviderError from `classify.from_error_type`, by the error body's `type` as well
as its status; the API key never appears in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Mapping
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import httpx2
import orjson
import structlog

from jobstream.errors import ProviderError
from jobstream.jobspec import Message, chat
from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker.providers import classify
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem, TextDelta
from jobstream.worker.providers.sdk_http import LIMITS, TRACE, SendTrace, TracingClient
from jobstream.worker.providers.sse_bytes import SseDecoder

if TYPE_CHECKING:
    # At run time the SDK is imported by the first request (`_sdk`), not with this module: the
    # server builds this provider only to price jobs, and the import costs about a second of
    # CPU, at every start of every server and worker.
    import anthropic

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


@dataclass
class _Counts:
    """The usage a stream reported so far (message_delta's counts are cumulative)."""

    input: int = 0  # uncached input
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    def update(self, usage: object) -> None:
        if not isinstance(usage, Mapping):
            return
        for name, field in (
            ("input_tokens", "input"),
            ("output_tokens", "output"),
            ("cache_creation_input_tokens", "cache_write"),
            ("cache_read_input_tokens", "cache_read"),
        ):
            value = usage.get(name)
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
        import anthropic

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
                # Redirects are not followed: a 3xx is a failure of the configuration, never a
                # POST sent elsewhere.
                http_client=TracingClient(
                    error_read_s=self._idle_timeout_s,
                    timeout=timeout,
                    limits=LIMITS,
                    follow_redirects=False,
                ),
            )
        return self._client

    def prepare(self) -> None:
        """The SDK imported and its client made now, not at the first request (a worker's
        start: registry.prepare_providers). Without a key no call is made, so nothing is."""
        if self._api_key:
            self._sdk()

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
        import anthropic  # at the first request: see TYPE_CHECKING above

        trace = SendTrace(request.send_mark)
        params = self._params(request)
        log.debug("anthropic.request", model=params["model"], attempt=request.attempt)
        loop = asyncio.get_running_loop()
        # Absolute: neither response headers nor message_start extend it.
        first_token_deadline = loop.time() + self._first_token_timeout_s
        # The response is ours to close from the moment it exists, however the consumer leaves:
        # exhausted, failed, cancelled, or `aclose()` of this generator.
        async with AsyncExitStack() as owned:
            token = TRACE.set(trace)
            try:
                async with asyncio.timeout_at(first_token_deadline):
                    response = await owned.enter_async_context(
                        self._sdk().messages.with_streaming_response.create(**params, stream=True)
                    )
            except TimeoutError:
                raise self._failed(
                    classify.from_stream_fault(
                        "first_token_timeout", request_sent=trace.request_sent
                    )
                ) from None
            except anthropic.APIStatusError as exc:
                raise self._failed(self._status_error(exc)) from None
            except anthropic.APIConnectionError as exc:
                raise self._failed(_connection_error(exc, trace.request_sent)) from exc
            finally:
                TRACE.reset(token)
            # aclosing: leaving early must close the inner generator now, not at GC time.
            body = response.http_response
            async with aclosing(self._items(body, request, first_token_deadline)) as items:
                async for item in items:
                    yield item

    async def _items(
        self, response: httpx2.Response, request: ProviderRequest, first_token_deadline: float
    ) -> AsyncGenerator[StreamItem, None]:
        loop = asyncio.get_running_loop()
        pieces = response.aiter_bytes()
        decoder = SseDecoder()
        counts = _Counts()
        text_parts: list[str] = []
        stopped = ended = got_text = False
        try:
            while not (stopped or ended):
                deadline = loop.time() + self._idle_timeout_s if got_text else first_token_deadline
                try:
                    async with asyncio.timeout_at(deadline):
                        piece: bytes | None = await anext(pieces)
                except StopAsyncIteration:
                    piece = None
                except TimeoutError:
                    fault: classify.StreamFault = (
                        "idle_timeout" if got_text else "first_token_timeout"
                    )
                    raise self._failed(classify.from_stream_fault(fault)) from None
                except httpx2.TransportError as exc:
                    raise self._failed(_connection_error(exc, request_sent=True)) from exc
                ended = piece is None
                for data in decoder.finish() if piece is None else decoder.feed(piece):
                    event = self._event(data)
                    kind = event.get("type")
                    if kind == "content_block_delta":
                        delta = event.get("delta")
                        if isinstance(delta, dict) and delta.get("type") == "text_delta":
                            text = delta.get("text")
                            if isinstance(text, str) and text:
                                got_text = True
                                text_parts.append(text)
                                yield TextDelta(text)
                    elif kind == "message_start":
                        message = event.get("message")
                        if isinstance(message, dict):
                            counts.update(message.get("usage"))
                    elif kind == "message_delta":
                        counts.update(event.get("usage"))
                        delta = event.get("delta")
                        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
                        if isinstance(reason, str):
                            request.finish.reason = _FINISH.get(reason, "stop")
                    elif kind == "message_stop":
                        stopped = True
                        break
                    elif kind == "error":
                        raise self._failed(self._stream_error(event))
                    # ping, content_block_start/stop, and types to come carry nothing for us.
        finally:
            await pieces.aclose()
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

    def _event(self, data: bytes) -> dict[str, Any]:
        """One event's data: a JSON object, or the stream is malformed."""
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise self._failed(
                classify.from_stream_fault("malformed_chunk", detail=str(exc))
            ) from None
        if not isinstance(event, dict):
            raise self._failed(
                classify.from_stream_fault("malformed_chunk", detail="an event that is no object")
            )
        return event

    def _stream_error(self, event: Mapping[str, Any]) -> ProviderError:
        """An `error` event after the 200: its error's type says what failed."""
        error = event.get("error")
        body: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
        error_type = body.get("type")
        message = body.get("message")
        detail = message if isinstance(message, str) else ""
        return classify.from_error_type(
            200,
            error_type if isinstance(error_type, str) else None,
            {},
            detail=self._redact(" ".join(detail.split()))[:_DETAIL_LIMIT],
            in_stream=True,
        )

    def _status_error(self, exc: anthropic.APIStatusError) -> ProviderError:
        """An error status: the SDK read the (bounded) body for its type and message."""
        detail = exc.api_message if isinstance(exc.api_message, str) else ""
        error_type = exc.type if isinstance(exc.type, str) else None
        return classify.from_error_type(
            exc.status_code,
            error_type,
            exc.response.headers,
            detail=self._redact(" ".join(detail.split()))[:_DETAIL_LIMIT],
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
    cause = exc if isinstance(exc, httpx2.TransportError) else exc.__cause__
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
