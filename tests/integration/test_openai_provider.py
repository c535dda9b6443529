"""The OpenAI provider against the fake OpenAI server, over real loopback sockets: what it sends,
what its stream yields, and closing a stream early; and the fake held to the wire by the official
SDK's own typed parser. Its failures: test_openai_provider_errors.py.
"""

from __future__ import annotations

import asyncio
import logging

import openai
import pydantic
import pytest
import structlog

from jobstream import prices
from jobstream.settings import Settings
from jobstream.worker.providers.base import ProviderRequest, TextDelta
from jobstream.worker.providers.openai import OpenAIProvider, estimate_tokens
from tests.support.fake_openai import FakeOpenAI, Reply, expected_text, fetch_stats, prompt_tokens
from tests.support.http_server import http_client
from tests.support.openai_jobs import KEY
from tests.support.provider_streams import PROMPT, collect, describe, failure, last, request


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
    # The settings' model is none the catalogue knows: OpenAI's default price.
    default = prices.load().default("openai")
    assert usage.cost_usd == default.input * 4 / 1_000_000 + default.output * 6 / 1_000_000
    assert usage.cost_known
    assert last(stats) == "completed"


async def test_cached_prompt_tokens_are_counted_and_priced_at_the_cache_read_price(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.push(Reply(cached_tokens=3))
    req = request(model="gpt-4o-mini-2024-07-18", max_tokens=6)
    _, usage = await collect(provider, req)

    price = prices.load().price_of("openai", "gpt-4o-mini")
    assert price.cache_read < price.input  # else the test could not tell them apart
    billed = prompt_tokens(PROMPT)
    assert (usage.input_tokens, usage.cache_read_tokens) == (billed, 3)
    assert (
        usage.cost_usd
        == ((billed - 3) * price.input + 3 * price.cache_read + 6 * price.output) / 1_000_000
    )


async def test_the_official_sdk_parses_the_fakes_stream(fake: FakeOpenAI) -> None:
    """The provider reads the stream's raw SSE bytes (the SDK's typed chunks cost 3.7 times the
    CPU a token: docs/architecture.md), so no other provider test runs the SDK's parser. Here it
    parses the fake's streams itself: with strict response validation every chunk is validated
    as a ChatCompletionChunk, and the stream helper accumulates them into the ChatCompletion, so
    a chunk the real API would not send, or a field out of place, fails here."""

    class Answer(pydantic.BaseModel):
        city: str

    client = openai.AsyncOpenAI(
        api_key=KEY, base_url=fake.base_url, max_retries=0, _strict_response_validation=True
    )
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": PROMPT},
    ]
    try:
        fake.push(Reply(comments=True))
        async with client.chat.completions.stream(
            model="m", messages=messages, max_tokens=64, stream_options={"include_usage": True}
        ) as stream:
            deltas = [e.delta async for e in stream if e.type == "content.delta"]
            completion = await stream.get_final_completion()
        said = f"be brief\n{PROMPT}"
        assert "".join(deltas) == completion.choices[0].message.content == expected_text(said, 16)
        assert completion.choices[0].finish_reason == "stop"
        assert completion.usage is not None
        assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
            prompt_tokens(said),
            16,
        )
        # Structured output, parsed by the helper from the json_schema answer.
        fake.push(Reply(content='{"city": "Lisbon"}'))
        async with client.chat.completions.stream(
            model="m", messages=messages, max_tokens=64, response_format=Answer
        ) as parsing:
            parsed = await parsing.get_final_completion()
        assert parsed.choices[0].message.parsed == Answer(city="Lisbon")
        assert parsed.choices[0].finish_reason == "stop"
        assert fake.stats().records[-1].schema_name == "Answer"
        # A refusal's deltas, and a finish reason of the server's choosing (the helper raises
        # for a content filter, with what it accumulated).
        fake.push(Reply(refusal="I will not.", finish_reason="content_filter"))
        with pytest.raises(openai.ContentFilterFinishReasonError) as filtered:
            async with client.chat.completions.stream(
                model="m", messages=messages, max_tokens=64
            ) as refusing:
                await refusing.get_final_completion()
        assert filtered.value.completion is not None
        [choice] = filtered.value.completion.choices
        assert (choice.message.refusal, choice.finish_reason) == ("I will not.", "content_filter")
        # An error inside the 200 stream, as the SDK itself reads it.
        fake.push(Reply(kind="stream_error", status=503, after_tokens=1))
        with pytest.raises(openai.APIError) as caught:
            stream_with_error = await client.chat.completions.create(
                model="m", messages=messages, max_tokens=8, stream=True
            )
            async for _ in stream_with_error:
                pass
        assert (caught.value.code, caught.value.message) == ("503", "fake mid-stream failure")
    finally:
        await client.close()


async def test_sends_bearer_key_default_model_and_asks_for_usage(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    await collect(provider)
    await collect(provider, request(model="chosen-model", max_tokens=3))

    first, second = fake.stats().records
    assert first.authorized and first.include_usage
    assert "authorization" in first.header_names
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


async def test_without_a_key_no_authorization_is_sent_and_the_sdks_environment_stays_out(
    fake: FakeOpenAI, provider_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local server (Ollama, llama.cpp) takes no key. The SDK would read these from the
    # environment; the provider's settings are jobstream's alone.
    for name, value in [
        ("OPENAI_API_KEY", "sk-from-the-environment"),
        ("OPENAI_ORG_ID", "org-from-the-environment"),
        ("OPENAI_PROJECT_ID", "proj-from-the-environment"),
    ]:
        monkeypatch.setenv(name, value)
    async with OpenAIProvider(provider_settings.replace(openai_api_key="")) as provider:
        error, _ = await failure(provider)
    # This fake wants a key: the request went without one.
    assert (error.kind, error.status_code) == ("permanent", 401)
    [record] = fake.stats().records
    assert not {"authorization", "openai-organization", "openai-project"} & set(record.header_names)


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
    req = request(max_tokens=5)
    text, usage = await collect(provider, req)

    assert text == expected_text(PROMPT, 5)
    assert not usage.cost_known
    assert usage.input_tokens == estimate_tokens(PROMPT)
    assert usage.output_tokens == estimate_tokens(text)
    assert usage.cost_usd == provider.cost(req, usage.input_tokens, usage.output_tokens)
    assert not fake.stats().records[-1].usage_reported


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
    provider_settings: Settings,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = "sk-wrong-5e884898da28047151d0e56f8dc62927"
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    with structlog.testing.capture_logs() as events:
        # The fake echoes a rejected key in its 401 message, as careless servers do.
        async with OpenAIProvider(provider_settings.replace(openai_api_key=wrong)) as provider:
            texts.append(repr(provider))
            error, _ = await failure(provider)
            assert "[redacted]" in str(error)
            texts += describe(error)
        async with OpenAIProvider(provider_settings) as provider:
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

    async with http_client() as client:
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
