"""The OpenAI provider against the fake OpenAI server, over real loopback sockets."""

from __future__ import annotations

import asyncio
import logging
import socket
import traceback
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime

import httpx
import pytest
import structlog

from jobstream.errors import ProviderError
from jobstream.settings import Settings
from jobstream.usage import Usage
from tests.support.fake_openai import (
    FakeOpenAI,
    Reply,
    Stats,
    expected_text,
    fetch_stats,
    prompt_tokens,
)
from worker.providers.base import ProviderRequest, TextDelta
from worker.providers.openai import OpenAIProvider, estimate_tokens

KEY = "sk-jobstream-test-9f86d081884c7d659a2feaa0c55ad015"
PROMPT = "alpha beta gamma delta"
FIRST_TOKEN_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 0.4


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def fake(server: FakeOpenAI) -> AsyncIterator[FakeOpenAI]:
    async with server.one_test() as fresh:
        yield fresh


@pytest.fixture
def settings(fake: FakeOpenAI) -> Settings:
    return Settings(
        openai_base_url=fake.base_url,
        openai_api_key=KEY,
        openai_model="fake-default-model",
        openai_connect_timeout_s=2.0,
        openai_first_token_timeout_s=FIRST_TOKEN_TIMEOUT_S,
        openai_idle_timeout_s=IDLE_TIMEOUT_S,
        openai_input_usd_per_mtok=2.5,
        openai_output_usd_per_mtok=10.0,
    )


@pytest.fixture
async def provider(settings: Settings) -> AsyncIterator[OpenAIProvider]:
    async with OpenAIProvider(settings) as provider:
        yield provider


def request(prompt: str = PROMPT, max_tokens: int = 8, model: str | None = None) -> ProviderRequest:
    return ProviderRequest(prompt=prompt, model=model, max_tokens=max_tokens, attempt=1)


async def collect(
    provider: OpenAIProvider, req: ProviderRequest | None = None
) -> tuple[str, Usage]:
    deltas: list[str] = []
    usages: list[Usage] = []
    async for item in provider.stream(req or request()):
        assert not usages, "nothing may follow the usage"
        if isinstance(item, TextDelta):
            deltas.append(item.text)
        else:
            usages.append(item)
    assert len(usages) == 1
    return "".join(deltas), usages[0]


async def failure(
    provider: OpenAIProvider, req: ProviderRequest | None = None
) -> tuple[ProviderError, str]:
    """The error a stream ends with, and the text it yielded before."""
    text: list[str] = []
    with pytest.raises(ProviderError) as caught:
        async for item in provider.stream(req or request()):
            assert isinstance(item, TextDelta), "a failed stream yields no usage"
            text.append(item.text)
    return caught.value, "".join(text)


def last(stats: Stats) -> str:
    return stats.records[-1].outcome


async def test_streams_text_and_usage_equal_to_what_the_server_billed(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    text, usage = await collect(provider, request(max_tokens=6))

    assert text == expected_text(PROMPT, 6)
    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert (usage.input_tokens, usage.output_tokens) == (
        stats.billed_prompt_tokens,
        stats.billed_completion_tokens,
    )
    assert (usage.input_tokens, usage.output_tokens) == (prompt_tokens(PROMPT), 6)
    assert usage.cost_usd == Decimal("2.5") * 4 / 1_000_000 + Decimal(10) * 6 / 1_000_000
    assert usage.cost_known
    assert last(stats) == "completed"


async def test_sends_bearer_key_default_model_and_asks_for_usage(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    await collect(provider)
    await collect(provider, request(model="chosen-model", max_tokens=3))

    first, second = fake.stats().records
    assert first.authorized and first.include_usage
    assert (first.model, first.max_tokens) == ("fake-default-model", 8)
    assert (second.model, second.max_tokens) == ("chosen-model", 3)


async def test_sends_instructions_messages_and_sampling_as_given(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    conversation = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": PROMPT},
    ]
    req = ProviderRequest(
        prompt=PROMPT, model=None, max_tokens=4, attempt=1, messages=conversation,
        instructions="be brief", sampling={"temperature": 0.2, "top_p": 0.9},
    )  # fmt: skip
    text, _ = await collect(provider, req)

    [record] = fake.stats().records
    assert record.messages == (
        ("system", "be brief"),
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", PROMPT),
    )
    assert record.sampling == (("temperature", 0.2), ("top_p", 0.9))
    assert text == expected_text("\n".join(m[1] for m in record.messages), 4)


async def test_comment_lines_between_chunks_are_ignored(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(comments=True))
    text, usage = await collect(provider, request(max_tokens=4))
    assert text == expected_text(PROMPT, 4)
    assert usage.cost_known


async def test_without_a_usage_chunk_usage_is_estimated_and_flagged(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(usage=False))
    text, usage = await collect(provider, request(max_tokens=5))

    assert text == expected_text(PROMPT, 5)
    assert not usage.cost_known
    assert usage.input_tokens == estimate_tokens(PROMPT)
    assert usage.output_tokens == estimate_tokens(text)
    assert usage.cost_usd == provider.cost(usage.input_tokens, usage.output_tokens)
    assert not fake.stats().records[-1].usage_reported


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


async def test_connection_refused_is_transient_and_not_sent(settings: Settings) -> None:
    # Bound but not listening: the kernel refuses connections, and no one else gets the port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        refused = settings.replace(openai_base_url=f"http://127.0.0.1:{port}/v1")
        async with OpenAIProvider(refused) as provider:
            error, _ = await failure(provider)
    assert (error.kind, error.request_sent) == ("transient", False)


async def test_bad_key_is_permanent(fake: FakeOpenAI, settings: Settings) -> None:
    async with OpenAIProvider(settings.replace(openai_api_key="sk-wrong")) as provider:
        error, _ = await failure(provider)
    assert (error.kind, error.status_code) == ("permanent", 401)
    assert not fake.stats().records[-1].authorized


@pytest.mark.parametrize(
    ("reply", "tokens_before_cancel"),
    [
        (Reply(tokens=100_000, token_delay_s=0.01), 3),  # cancelled while tokens flow
        (Reply(kind="hang"), 0),  # cancelled while waiting for the first token
    ],
)
async def test_cancelling_the_consumer_closes_the_request(
    fake: FakeOpenAI, provider: OpenAIProvider, reply: Reply, tokens_before_cancel: int
) -> None:
    fake.push(reply)
    seen = 0

    async def consume() -> None:
        nonlocal seen
        async for item in provider.stream(request(max_tokens=100_000)):
            if isinstance(item, TextDelta):
                seen += 1

    task = asyncio.create_task(consume())
    await fake.wait_until(
        lambda s: s.in_flight == 1 and s.records[-1].tokens_sent >= tokens_before_cancel
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert last(stats) == "client_closed"
    assert stats.records[-1].tokens_sent < 100_000


async def test_aclose_of_the_stream_closes_the_request(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(tokens=100_000, token_delay_s=0.01))
    stream = provider.stream(request(max_tokens=100_000))
    first = await anext(stream)
    assert first == TextDelta(expected_text(PROMPT, 1))
    assert fake.stats().in_flight == 1

    await stream.aclose()

    stats = await fake.wait_until(lambda s: s.in_flight == 0)
    assert last(stats) == "client_closed"


async def test_api_key_never_appears_in_errors_or_logs(
    fake: FakeOpenAI,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "sk-wrong-5e884898da28047151d0e56f8dc62927"
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with structlog.testing.capture_logs() as events:
        # The fake echoes a rejected key in its 401 message, as careless servers do.
        async with OpenAIProvider(settings.replace(openai_api_key=wrong)) as provider:
            texts.append(repr(provider))
            error, _ = await failure(provider)
            assert "[redacted]" in str(error)
            texts += describe(error)
        async with OpenAIProvider(settings) as provider:
            texts.append(repr(provider))
            await collect(provider)
            for reply in (Reply(kind="disconnect", after_tokens=1), Reply(kind="hang")):
                fake.push(reply)
                error, _ = await failure(provider)
                texts += describe(error)
    captured = capsys.readouterr()
    texts += [caplog.text, repr(events), captured.out, captured.err]
    haystack = "\n".join(texts)

    assert "openai.failed" in haystack, "the failures were logged somewhere we looked"
    assert KEY not in haystack
    assert wrong not in haystack


def describe(error: BaseException) -> list[str]:
    """Every text an error shows: message, repr, and the traceback with its causes."""
    return [str(error), repr(error), "".join(traceback.format_exception(error))]


async def test_fake_counts_concurrency_and_answers_over_http(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(*[Reply(kind="hang")] * 3)
    tasks = [asyncio.create_task(collect(provider)) for _ in range(3)]
    try:
        await fake.wait_until(lambda s: s.in_flight == 3)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await fake.wait_until(lambda s: s.in_flight == 0)

    async with httpx.AsyncClient() as client:
        stats = await fetch_stats(client, fake.url)
        assert (stats.requests, stats.max_in_flight) == (3, 3)
        assert stats.outcomes == {"client_closed": 3}
        assert stats == fake.stats()

        queued = await client.post(f"{fake.url}/_script", json=[{"kind": "error", "status": 404}])
        assert queued.json() == {"queued": 1}
        error, _ = await failure(provider)
        assert (error.kind, error.status_code) == ("permanent", 404)

        reset = await client.post(f"{fake.url}/_reset")
        assert reset.json()["requests"] == 0
        assert fake.stats().max_in_flight == 0
