"""The OpenAI-compatible provider: one streamed `/chat/completions` call per attempt, made by
the official SDK.

Works against OpenAI, vLLM, Ollama, llama.cpp and anything else that speaks the chat
completions stream (`stream: true`, `stream_options.include_usage`). The SDK builds and sends
the request (auth, headers, the body) with its own retries off (`max_retries=0`: jobstream
retries, and records every try as an attempt), and raises an error status as its
APIStatusError. The stream's body is read here, as raw SSE bytes parsed with orjson, not as the
SDK's typed ChatCompletionChunk models: at 300 concurrent streams those cost 3.7 times the CPU a
token, where this path costs what the hand-written httpx client it replaced did
(docs/architecture.md, "The providers on their SDKs"; bench/openai_sdk_paths.py).
tests/integration/test_openai_provider.py holds the fake's stream to what the SDK's own typed
parser accepts.

Every failure leaves as a ProviderError from `classify`; the API key never appears in a log line
or an error message.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Iterable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, cast

import httpx2
import orjson
import structlog

from jobstream.errors import ProviderError
from jobstream.jobspec import chat
from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker.providers import classify
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem, TextDelta
from jobstream.worker.providers.sdk_http import LIMITS, TRACE, SendTrace, TracingClient
from jobstream.worker.providers.sse_bytes import SseDecoder

if TYPE_CHECKING:
    # At run time the SDK is imported by the first request (`_sdk`), not with this module: the
    # server builds this provider only to price jobs, and the import costs 0.4 to 0.8 s of CPU
    # here, at every start of every server and worker.
    import openai
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.shared_params import ResponseFormatJSONSchema

log = structlog.get_logger(__name__)

# An error body's message is cut to this for the attempt's row.
_DETAIL_LIMIT: Final = 300
# The SDK will not be made without a key; a server that needs none (Ollama, llama.cpp) is sent
# no Authorization header at all (see `_headers`), so this never leaves the process.
_NO_KEY: Final = "unused"


def estimate_tokens(text: str) -> int:
    """About four characters a token for English text: good enough for reservations and for
    the cost of an attempt whose server never reported usage."""
    return math.ceil(len(text) / 4)


def _input_tokens(request: Prompt) -> int:
    conversation = chat(request.prompt, request.messages, request.instructions)
    return estimate_tokens("".join(message["content"] for message in conversation))


class OpenAIProvider:
    """`stream()` one chat completion; `aclose()` the SDK's client if it was made."""

    name = "openai"

    def __init__(self, settings: Settings) -> None:
        self._base_url = settings.openai_base_url.rstrip("/")
        self._url = self._base_url + "/chat/completions"
        self._api_key = settings.openai_api_key
        self._model = settings.openai_model
        self._connect_timeout_s = settings.openai_connect_timeout_s
        self._first_token_timeout_s = settings.openai_first_token_timeout_s
        self._idle_timeout_s = settings.openai_idle_timeout_s
        self._prices = settings.prices
        # Made at the first request, not here: the server builds this provider to price jobs
        # and never sends one, and an HTTP client costs 50-90 ms of CPU to make (its TLS
        # context loads the system's certificates), at every server start.
        self._client: openai.AsyncOpenAI | None = None

    def __repr__(self) -> str:
        return f"OpenAIProvider(url={self._url!r}, model={self._model!r})"

    def _sdk(self) -> openai.AsyncOpenAI:
        import openai

        if self._client is None:
            # Reads are timed by us (first token, idle); the SDK times connecting and writing.
            timeout = httpx2.Timeout(
                connect=self._connect_timeout_s,
                read=None,
                write=self._idle_timeout_s,
                pool=self._connect_timeout_s,
            )
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key or _NO_KEY,
                base_url=self._base_url,
                max_retries=0,  # jobstream retries, and records each try
                timeout=timeout,
                # Redirects are not followed (the SDK's client would): a 3xx is a permanent
                # failure of the configuration, never a POST sent elsewhere.
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
        start: registry.prepare_providers)."""
        self._sdk()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> OpenAIProvider:
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
        self, request: Prompt, input_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> Decimal:
        """The price of a call. `input_tokens` is OpenAI's prompt_tokens, which counts the
        cached ones too: those are priced at the model's cached-input price."""
        return self.price(request).cost(
            input_tokens - cached_tokens, output_tokens, cache_read_tokens=cached_tokens
        )

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return self.cost(request, _input_tokens(request), output_tokens)

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[StreamItem, None]:
        import openai  # at the first request: see TYPE_CHECKING above

        model = request.model or self._model
        trace = SendTrace(request.send_mark)
        log.debug("openai.request", url=self._url, model=model, attempt=request.attempt)
        loop = asyncio.get_running_loop()
        # Absolute: neither response headers nor a role-only chunk extend it.
        first_token_deadline = loop.time() + self._first_token_timeout_s
        # The response is ours to close from the moment it exists, however the consumer leaves:
        # exhausted, failed, cancelled, or `aclose()` of this generator.
        async with AsyncExitStack() as owned:
            token = TRACE.set(trace)
            try:
                async with asyncio.timeout_at(first_token_deadline):
                    client = self._sdk()
                    response = await owned.enter_async_context(
                        client.chat.completions.with_streaming_response.create(
                            model=model,
                            messages=_messages(request),
                            max_tokens=request.max_tokens,
                            stream=True,
                            stream_options={"include_usage": True},
                            temperature=request.sampling.get("temperature", openai.omit),
                            top_p=request.sampling.get("top_p", openai.omit),
                            response_format=_response_format(request),
                            extra_headers=_headers(self._api_key),
                        )
                    )
            except TimeoutError:
                raise self._failed(
                    classify.from_stream_fault(
                        "first_token_timeout", request_sent=trace.request_sent
                    )
                ) from None
            except openai.APIStatusError as exc:
                raise self._failed(
                    classify.from_status(
                        exc.status_code, exc.response.headers, detail=self._error_detail(exc)
                    )
                ) from None
            except openai.APIConnectionError as exc:
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
        text_parts: list[str] = []
        refusal: list[str] = []
        usage: tuple[int, int, int] | None = None
        finished = False
        done = False  # `[DONE]` read, or the body ended
        got_text = False
        try:
            while not done:
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
                    raise self._failed(classify.from_transport(exc, request_sent=True)) from exc
                for data in decoder.finish() if piece is None else decoder.feed(piece):
                    if data == b"[DONE]":
                        finished = done = True
                        break
                    chunk = self._parse_chunk(data)
                    usage = chunk.usage or usage
                    finished = finished or chunk.finish_reason is not None
                    if chunk.finish_reason is not None:
                        request.finish.reason = chunk.finish_reason
                    if chunk.refusal:
                        refusal.append(chunk.refusal)
                        got_text = True
                    if chunk.text:
                        got_text = True
                        text_parts.append(chunk.text)
                        yield TextDelta(chunk.text)
                done = done or piece is None
        finally:
            await pieces.aclose()
        # A server may end the body without `[DONE]`; a finish reason or the usage chunk still
        # proves the answer complete. Without either we cannot tell what was produced.
        if not finished and usage is None:
            raise self._failed(classify.from_stream_fault("ended_early"))
        if refusal:
            request.finish.refusal = "".join(refusal)
        yield self._usage(request, usage, "".join(text_parts))

    def _parse_chunk(self, data: bytes) -> _Chunk:
        try:
            return _Chunk.parse(data)
        except _MalformedChunk as exc:
            raise self._failed(
                classify.from_stream_fault("malformed_chunk", detail=str(exc))
            ) from None
        except _ErrorChunk as exc:
            raise self._failed(classify.from_error_object(exc.payload)) from None

    def _usage(
        self, request: ProviderRequest, reported: tuple[int, int, int] | None, text: str
    ) -> Usage:
        if reported is not None:
            input_tokens, output_tokens, cached = reported
            cost = self.cost(request, input_tokens, output_tokens, cached)
            return Usage(input_tokens, output_tokens, cost, True, cache_read_tokens=cached)
        # The server sent no usage chunk (include_usage unsupported): our estimate, flagged.
        input_tokens, output_tokens = _input_tokens(request), estimate_tokens(text)
        return Usage(
            input_tokens,
            output_tokens,
            self.cost(request, input_tokens, output_tokens),
            cost_known=False,
        )

    def _error_detail(self, exc: openai.APIStatusError) -> str:
        """The server's error message (the SDK parsed the body we bounded); never required."""
        try:
            message: object = exc.response.text
        except httpx2.ResponseNotRead:
            message = ""
        body = exc.body
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                message = error["message"]
            elif isinstance(error, str):
                message = error
        # Redact before cutting, so a cut cannot leave part of a key behind.
        return self._redact(" ".join(str(message).split()))[:_DETAIL_LIMIT]

    def _redact(self, text: str) -> str:
        # Some servers echo the key they rejected ("Incorrect API key provided: ...").
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
            "openai.failed",
            kind=redacted.kind,
            status_code=redacted.status_code,
            request_sent=redacted.request_sent,
            retry_after_s=redacted.retry_after_s,
            error=redacted.message,
        )
        return redacted


def _headers(api_key: str) -> dict[str, str | openai.Omit]:
    """What every request adds to the SDK's headers. The provider's settings are jobstream's
    alone: the SDK would otherwise send OPENAI_ORG_ID and OPENAI_PROJECT_ID from the worker's
    environment, which a server may refuse for this key."""
    import openai

    headers: dict[str, str | openai.Omit] = {
        "Accept": "text/event-stream",
        "OpenAI-Organization": openai.omit,
        "OpenAI-Project": openai.omit,
    }
    if not api_key:  # local servers (Ollama, llama.cpp) need none
        headers["Authorization"] = openai.omit
    return headers


def _connection_error(exc: openai.APIConnectionError, request_sent: bool) -> ProviderError:
    """A connection that failed before an answer: the send trace decides whether any of the
    request had left us (a keep-alive connection the server closed fails with a read error
    before any byte of ours went out)."""
    cause = exc.__cause__
    if isinstance(cause, httpx2.TransportError):
        return classify.from_transport(cause, request_sent=request_sent)
    described = cause if cause is not None else exc
    return classify.from_connection(
        f"{type(described).__name__}: {described}" if str(described) else type(described).__name__,
        request_sent=request_sent,
    )


class _MalformedChunk(Exception):
    """A chunk that is not the chat.completion.chunk shape (internal: becomes ProviderError)."""


class _ErrorChunk(Exception):
    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__("error chunk")
        self.payload = payload


@dataclass(frozen=True)
class _Chunk:
    """What one `chat.completion.chunk` tells us; only choice 0 is read (we ask for n=1)."""

    text: str
    usage: tuple[int, int, int] | None  # (prompt_tokens, completion_tokens, cached of prompt)
    finish_reason: str | None
    refusal: str = ""  # structured output's refusal text, instead of content

    @classmethod
    def parse(cls, data: bytes) -> _Chunk:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _MalformedChunk("not JSON") from None
        if not isinstance(chunk, dict):
            raise _MalformedChunk("not a JSON object")
        if "error" in chunk or chunk.get("object") == "error":
            raise _ErrorChunk(chunk)
        text, finish_reason, refusal = _first_choice(chunk.get("choices"))
        return cls(text, _usage_counts(chunk.get("usage")), finish_reason, refusal)


def _first_choice(choices: object) -> tuple[str, str | None, str]:
    """Choice 0's text, finish reason and refusal text."""
    if choices is None or choices == []:
        return "", None, ""  # the usage chunk has no choices
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise _MalformedChunk("choices is not a list of objects")
    reason = choices[0].get("finish_reason")
    finish_reason = reason if isinstance(reason, str) else None
    delta = choices[0].get("delta")
    if delta is None:
        return "", finish_reason, ""
    if not isinstance(delta, dict):
        raise _MalformedChunk("delta is not an object")
    refusal = delta.get("refusal")
    refused = refusal if isinstance(refusal, str) else ""
    content = delta.get("content")
    if content is None:
        return "", finish_reason, refused  # role-only and tool-call deltas carry no text
    if not isinstance(content, str):
        raise _MalformedChunk("delta.content is not a string")
    return content, finish_reason, refused


def _response_format(request: ProviderRequest) -> ResponseFormatJSONSchema | openai.Omit:
    """Structured output, where the request asks for it (OpenAI's json_schema format)."""
    import openai

    if request.json_schema is None:
        return openai.omit
    return cast(
        "ResponseFormatJSONSchema", {"type": "json_schema", "json_schema": request.json_schema}
    )


def _messages(request: ProviderRequest) -> Iterable[ChatCompletionMessageParam]:
    return cast("list[ChatCompletionMessageParam]", request.chat())


def _usage_counts(usage: object) -> tuple[int, int, int] | None:
    if usage is None:
        return None  # every chunk but the last says "usage": null
    if not isinstance(usage, dict):
        raise _MalformedChunk("usage is not an object")
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (_is_count(prompt) and _is_count(completion)):
        raise _MalformedChunk("usage token counts are not counts")
    assert isinstance(prompt, int) and isinstance(completion, int)
    # Cached prompt tokens, where the server reports them (OpenAI does; many others do not):
    # priced at the cache-read price. Optional, so anything but a count is none.
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not (isinstance(cached, int) and _is_count(cached)):
        cached = 0
    return prompt, completion, min(cached, prompt)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
