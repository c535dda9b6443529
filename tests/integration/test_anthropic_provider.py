"""The Anthropic provider against the fake Messages API over real HTTP, and the fake held to
the wire by the official SDK's own parser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest

from jobstream.errors import ProviderError
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker.providers.anthropic import AnthropicProvider
from jobstream.worker.providers.base import ProviderRequest, StreamItem, TextDelta
from tests.support.anthropic_jobs import KEY, MODEL, anthropic_settings, price
from tests.support.fake_anthropic import FakeAnthropic, Reply
from tests.support.fake_openai import expected_text, prompt_tokens

PROMPT = "tell me about the leases of durable jobs"


@pytest.fixture
def fake(claude: FakeAnthropic) -> FakeAnthropic:
    return claude


@pytest.fixture
async def provider(settings: Settings, fake: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    async with AnthropicProvider(anthropic_settings(settings, fake.base_url)) as made:
        yield made


def request(prompt: str = PROMPT, max_tokens: int = 8, **fields: object) -> ProviderRequest:
    return ProviderRequest(prompt=prompt, model=None, max_tokens=max_tokens, attempt=1, **fields)  # type: ignore[arg-type]


async def collect(provider: AnthropicProvider, req: ProviderRequest) -> list[StreamItem]:
    return [item async for item in provider.stream(req)]


async def failure(provider: AnthropicProvider, req: ProviderRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await collect(provider, req)
    return caught.value


async def test_the_official_sdk_parses_the_fakes_stream(fake: FakeAnthropic) -> None:
    # The fake's frames through the SDK's own stream helper and message accumulator: a frame
    # the real API would not send, or a field out of place, fails here.
    fake.push(Reply(cache_read=5, cache_write=3))
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
    try:
        async with client.messages.stream(
            model="claude-test", max_tokens=64, system="be brief",
            messages=[{"role": "user", "content": PROMPT}],
        ) as stream:  # fmt: skip
            text = "".join([piece async for piece in stream.text_stream])
            message = await stream.get_final_message()
        assert text == expected_text(PROMPT, 16)
        assert message.content[0].type == "text" and message.content[0].text == text
        assert message.stop_reason == "end_turn"
        usage = message.usage
        assert (usage.input_tokens, usage.output_tokens) == (
            prompt_tokens(f"be brief\n{PROMPT}"),
            16,
        )
        assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (5, 3)
        # An error event after the 200: the SDK raises it as a bare APIStatusError, status 200.
        fake.push(Reply(kind="stream_error", error_type="overloaded_error", after_tokens=2))
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with client.messages.stream(
                model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "x"}]
            ) as stream:
                async for _ in stream.text_stream:
                    pass
        assert (caught.value.status_code, caught.value.type) == (200, "overloaded_error")
    finally:
        await client.close()


async def test_text_usage_and_cache_tokens_priced_apart(
    provider: AnthropicProvider, fake: FakeAnthropic
) -> None:
    fake.push(Reply(cache_read=100, cache_write=40))
    req = request(instructions="be brief")
    items = await collect(provider, req)
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text == expected_text(PROMPT, 8)
    usage = items[-1]
    uncached = prompt_tokens(f"be brief\n{PROMPT}")
    assert usage == Usage(
        uncached + 140, 8, price(uncached, 8, cache_write=40, cache_read=100), True,
        cache_read_tokens=100, cache_write_tokens=40,
    )  # fmt: skip
    assert req.finish.reason == "length"  # 8 tokens of max_tokens=8: stop_reason max_tokens
    assert req.send_mark.sent  # the SDK's HTTP client carried our trace
    (record,) = fake.stats().records
    assert (record.system, record.prompt, record.max_tokens) == ("be brief", PROMPT, 8)
    assert record.model == MODEL


async def test_stop_reasons_map_to_the_finish(
    provider: AnthropicProvider, fake: FakeAnthropic
) -> None:
    fake.push(Reply(tokens=3), Reply(content="no.", stop_reason="refusal"))
    done = request(max_tokens=64)
    await collect(provider, done)
    assert done.finish.reason == "stop"
    refused = request(max_tokens=64)
    await collect(provider, refused)
    assert (refused.finish.reason, refused.finish.refusal) == ("refusal", "no.")


def status(code: int, error_type: str) -> Reply:
    return Reply(kind="error", status=code, error_type=error_type)


def in_stream(error_type: str) -> Reply:
    return Reply(kind="stream_error", error_type=error_type, after_tokens=2)


# (reply, kind, refused: billed nothing, pauses the provider)
ERRORS = [
    pytest.param(status(529, "overloaded_error"), "transient", True, True, id="529"),
    pytest.param(status(500, "api_error"), "transient", True, False, id="500"),
    pytest.param(status(400, "invalid_request_error"), "permanent", True, False, id="400"),
    pytest.param(status(403, "permission_error"), "permanent", True, False, id="403"),
    pytest.param(status(404, "not_found_error"), "permanent", True, False, id="404"),
    pytest.param(status(413, "request_too_large"), "permanent", True, False, id="413"),
    pytest.param(in_stream("overloaded_error"), "transient", False, True, id="overloaded-mid"),
    pytest.param(in_stream("api_error"), "transient", False, False, id="api-error-mid"),
    pytest.param(Reply(kind="disconnect", after_tokens=2), "unknown", False, False, id="dropped"),
]


@pytest.mark.parametrize(("reply", "kind", "refused", "pause"), ERRORS)
async def test_errors_are_classified_by_type_and_status(
    provider: AnthropicProvider,
    fake: FakeAnthropic,
    reply: Reply,
    kind: str,
    refused: bool,
    pause: bool,
) -> None:
    fake.push(reply)
    error = await failure(provider, request())
    assert (error.kind, error.refused, error.pause_provider) == (kind, refused, pause)
    assert error.request_sent
    assert fake.stats().requests == 1  # the SDK retried nothing


async def test_a_429_carries_its_retry_after(
    provider: AnthropicProvider, fake: FakeAnthropic
) -> None:
    fake.push(Reply(kind="error", status=429, error_type="rate_limit_error", retry_after="7"))
    error = await failure(provider, request())
    assert (error.kind, error.retry_after_s, error.pause_provider) == ("rate_limited", 7.0, False)


async def test_a_rejected_key_is_permanent_and_never_shown(
    settings: Settings, fake: FakeAnthropic
) -> None:
    wrong = "sk-ant-wrong-key-0123456789"
    chosen = anthropic_settings(settings, fake.base_url).replace(anthropic_api_key=wrong)
    async with AnthropicProvider(chosen) as provider:
        error = await failure(provider, request())
    assert error.kind == "permanent" and "authentication_error" in error.message
    assert wrong not in error.message and "[redacted]" in error.message


async def test_a_refused_connection_is_transient_and_not_sent(settings: Settings) -> None:
    async with FakeAnthropic(api_key=KEY) as gone:
        url = gone.base_url  # a port nobody listens on once it stops
    async with AnthropicProvider(anthropic_settings(settings, url)) as provider:
        req = request()
        error = await failure(provider, req)
    assert (error.kind, error.request_sent, req.send_mark.sent) == ("transient", False, False)


async def test_structured_output_asks_for_the_schema(
    provider: AnthropicProvider, fake: FakeAnthropic
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fake.push(Reply(content='{"a": 1}'))
    req = request(max_tokens=64, json_schema={"name": "A", "schema": schema, "strict": True})
    items = await collect(provider, req)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == '{"a": 1}'
    (record,) = fake.stats().records
    assert record.output_format == {"type": "json_schema", "schema": schema}
