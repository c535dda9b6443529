"""Driving `OpenAIProvider` directly against the fake OpenAI server: a request, and what its
stream yields or ends with. The fixtures (`provider_settings`, `provider`) are in
tests/integration/conftest.py."""

from __future__ import annotations

import traceback

import pytest

from jobstream.errors import ProviderError
from jobstream.usage import Usage
from jobstream.worker.providers.base import ProviderRequest, TextDelta
from jobstream.worker.providers.openai import OpenAIProvider
from tests.support.fake_openai import Stats

PROMPT = "alpha beta gamma delta"
FIRST_TOKEN_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 0.4


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


def describe(error: BaseException) -> list[str]:
    """Every text an error shows: message, repr, and the traceback with its causes."""
    return [str(error), repr(error), "".join(traceback.format_exception(error))]
