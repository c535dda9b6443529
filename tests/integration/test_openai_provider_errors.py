"""How the OpenAI provider classifies failures of the fake OpenAI server, over real loopback
sockets: error statuses and their Retry-After, broken streams, timeouts, refused connections.
"""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from jobstream.settings import Settings
from jobstream.worker.providers.openai import OpenAIProvider
from tests.support.fake_openai import FakeOpenAI, Reply, expected_text, prompt_tokens
from tests.support.provider_streams import (
    FIRST_TOKEN_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    PROMPT,
    collect,
    failure,
    last,
    request,
)


async def test_rate_limited_honours_retry_after_seconds(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="error", status=429, retry_after="7"))
    error, text = await failure(provider)
    assert (error.kind, error.status_code, error.retry_after_s) == ("rate_limited", 429, 7.0)
    assert text == ""
    assert "fake error 429" in str(error)  # the server's message is kept


async def test_rate_limited_honours_retry_after_http_date(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(
        Reply(
            kind="error",
            status=429,
            retry_after=format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True),
        )
    )
    error, _ = await failure(provider)
    assert error.kind == "rate_limited"
    assert error.retry_after_s is not None and 55 <= error.retry_after_s <= 60


async def test_rate_limited_prefers_retry_after_ms(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="error", status=429, retry_after="2", retry_after_ms="1500"))
    error, _ = await failure(provider)
    assert (error.kind, error.retry_after_s) == ("rate_limited", 1.5)


@pytest.mark.parametrize(
    ("status", "kind"), [(500, "transient"), (503, "transient"), (400, "permanent")]
)
async def test_error_status_kind(
    fake: FakeOpenAI, provider: OpenAIProvider, status: int, kind: str
) -> None:
    fake.push(Reply(kind="error", status=status))
    error, _ = await failure(provider)
    assert (error.kind, error.status_code, error.retry_after_s) == (kind, status, None)
    stats = fake.stats()
    assert (stats.billed_prompt_tokens, stats.billed_completion_tokens) == (0, 0)


async def test_marker_in_the_prompt_misbehaves_only_the_given_times(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    prompt = f"retry me {Reply(kind='error', status=502, times=1).marker()}"
    error, _ = await failure(provider, request(prompt))
    assert error.kind == "transient"
    text, _ = await collect(provider, request(prompt, max_tokens=3))
    assert text == expected_text(prompt, 3) == "retry me retry"


async def test_malformed_chunk_is_an_unknown_outcome(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="malformed", after_tokens=2))
    error, text = await failure(provider)

    assert (error.kind, error.request_sent) == ("unknown", True)
    assert "malformed" in str(error)
    assert text == expected_text(PROMPT, 2)
    # The server keeps the stream open after the bad chunk: only our close ends it.
    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert last(stats) == "client_closed"
    assert stats.billed_completion_tokens == 2


async def test_error_object_inside_the_stream_is_classified_by_its_code(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="stream_error", status=503, after_tokens=1))
    error, text = await failure(provider)
    assert (error.kind, error.status_code, error.request_sent) == ("transient", 503, True)
    assert text == expected_text(PROMPT, 1)


async def test_hang_after_headers_hits_the_first_token_timeout(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="hang"))
    started = asyncio.get_running_loop().time()
    error, text = await failure(provider)
    waited = asyncio.get_running_loop().time() - started

    assert (error.kind, error.request_sent) == ("unknown", True)
    assert "first-token timeout" in str(error)
    assert text == ""
    assert FIRST_TOKEN_TIMEOUT_S <= waited < FIRST_TOKEN_TIMEOUT_S + 2
    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert last(stats) == "client_closed"


async def test_silence_between_chunks_hits_the_idle_timeout(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="hang", after_tokens=3))
    error, text = await failure(provider)

    assert (error.kind, error.request_sent) == ("unknown", True)
    assert "idle" in str(error)
    assert text == expected_text(PROMPT, 3)
    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert stats.billed_completion_tokens == 3


async def test_slow_first_token_within_its_timeout_is_fine_though_longer_than_idle(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    # The idle timeout starts with the first token: prefill may take longer than a gap may.
    delay = IDLE_TIMEOUT_S + (FIRST_TOKEN_TIMEOUT_S - IDLE_TIMEOUT_S) / 2
    fake.push(Reply(first_token_delay_s=delay))
    text, _ = await collect(provider, request(max_tokens=3))
    assert text == expected_text(PROMPT, 3)


async def test_first_token_slower_than_its_timeout_is_an_unknown_outcome(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(first_token_delay_s=FIRST_TOKEN_TIMEOUT_S + 5))
    error, _ = await failure(provider)
    assert (error.kind, error.request_sent) == ("unknown", True)
    assert "first-token timeout" in str(error)


async def test_mid_stream_disconnect_is_an_unknown_outcome_billed_for_what_was_sent(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(kind="disconnect", after_tokens=2))
    error, text = await failure(provider)

    assert (error.kind, error.request_sent) == ("unknown", True)
    assert text == expected_text(PROMPT, 2)
    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert last(stats) == "dropped"
    assert (stats.billed_prompt_tokens, stats.billed_completion_tokens) == (
        prompt_tokens(PROMPT),
        2,
    )


async def test_connection_refused_is_transient_and_not_sent(provider_settings: Settings) -> None:
    # Bound but not listening: the kernel refuses connections, and no one else gets the port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        refused = provider_settings.replace(openai_base_url=f"http://127.0.0.1:{port}/v1")
        async with OpenAIProvider(refused) as provider:
            error, _ = await failure(provider)
    assert (error.kind, error.request_sent) == ("transient", False)


@pytest.mark.parametrize(
    ("sent", "within_s"),
    [
        # More than the 4 KiB the provider reads of an error: the rest is never waited for.
        (b'{"error": {"message": "' + b"x" * 5000, IDLE_TIMEOUT_S),
        # A body that stops: read until the idle timeout, then the status decides alone.
        (b'{"error": ', FIRST_TOKEN_TIMEOUT_S),
    ],
)
async def test_an_error_body_is_read_only_so_far_and_so_long(
    provider_settings: Settings, sent: bytes, within_s: float
) -> None:
    # The SDK would read an error body whole, however long and however slow: a 503 whose body
    # never ends would have become a first-token timeout, an unknown outcome.
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        writer.write(head + b"retry-after: 3\r\ncontent-length: 100000\r\n\r\n" + sent)
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stalling = provider_settings.replace(openai_base_url=f"http://127.0.0.1:{port}/v1")
    try:
        async with OpenAIProvider(stalling) as provider:
            started = asyncio.get_running_loop().time()
            error, _ = await failure(provider)
            waited = asyncio.get_running_loop().time() - started
    finally:
        server.close()
        await server.wait_closed()
    assert (error.kind, error.status_code, error.retry_after_s) == ("transient", 503, 3.0)
    assert error.refused
    assert waited < within_s
    assert len(str(error)) < 400


async def test_bad_key_is_permanent(fake: FakeOpenAI, provider_settings: Settings) -> None:
    async with OpenAIProvider(provider_settings.replace(openai_api_key="sk-wrong")) as provider:
        error, _ = await failure(provider)
    assert (error.kind, error.status_code) == ("permanent", 401)
    assert not fake.stats().records[-1].authorized
