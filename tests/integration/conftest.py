"""Integration fixtures: the HTTP API on a real uvicorn and a client for it, a pool wide enough
for racing claimers, webhook settings, and the fake OpenAI and Anthropic servers with a provider
pointed at each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from jobstream import db
from jobstream.server.app import create_app
from jobstream.settings import Settings
from jobstream.worker.providers.openai import OpenAIProvider
from tests.support import user_jobs
from tests.support.anthropic_jobs import KEY as ANTHROPIC_KEY
from tests.support.anthropic_jobs import anthropic_settings
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI
from tests.support.http_server import http_client, serve
from tests.support.openai_jobs import KEY, openai_settings
from tests.support.provider_streams import FIRST_TOKEN_TIMEOUT_S, IDLE_TIMEOUT_S
from tests.support.webhook_outbox import SECRET


@pytest.fixture
async def base_url(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings)) as url:
        yield url


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(base_url, timeout=30) as http:
        yield http


@pytest.fixture
async def required_url(settings: Settings) -> AsyncIterator[str]:
    """A server that requires API keys (JOBSTREAM_REQUIRE_API_KEY): a missing or stopped key is
    a 401, never the `default` tenant."""
    async with serve(create_app(settings.replace(require_api_key=True))) as url:
        yield url


@pytest.fixture
async def anonymous(required_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """No key for that server: what an EventSource sends (an events_url's token alone)."""
    async with http_client(base_url=required_url, timeout=30) as http:
        yield http


@pytest.fixture
async def wide_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """Twelve connections: enough for every claimer of a race to hold its own transaction at
    once."""
    pool = await db.create_pool(database_url, min_size=12, max_size=12)
    yield pool
    await pool.close()


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    """Webhooks that sign with SECRET, may reach loopback receivers and retry at once."""
    return settings.replace(
        webhook_allow_private=True,
        webhook_secret=SECRET,
        webhook_backoff_base_s=0.0,
        webhook_backoff_max_s=0.0,
        webhook_poll_interval_s=0.05,
        webhook_max_attempts=5,
    )


@pytest.fixture(scope="module")
async def openai_server() -> AsyncIterator[FakeOpenAI]:
    """The fake OpenAI server, one per module (starting one is the slow part)."""
    async with FakeOpenAI(api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def fake(openai_server: FakeOpenAI) -> AsyncIterator[FakeOpenAI]:
    """The module's fake OpenAI server, reset for this test and left idle by it."""
    async with openai_server.one_test() as fresh:
        yield fresh


@pytest.fixture
def provider_settings(fake: FakeOpenAI) -> Settings:
    """Settings for an `OpenAIProvider` on its own (no database), pointed at the fake."""
    return Settings(
        openai_base_url=fake.base_url,
        openai_api_key=KEY,
        openai_model="fake-default-model",
        openai_connect_timeout_s=2.0,
        openai_first_token_timeout_s=FIRST_TOKEN_TIMEOUT_S,
        openai_idle_timeout_s=IDLE_TIMEOUT_S,
    )


@pytest.fixture
async def provider(provider_settings: Settings) -> AsyncIterator[OpenAIProvider]:
    async with OpenAIProvider(provider_settings) as provider:
        yield provider


@pytest.fixture
def ai_settings(settings: Settings, fake: FakeOpenAI) -> Settings:
    """Settings with the OpenAI provider pointed at the fake (tests/support/openai_jobs.py)."""
    return openai_settings(settings, fake.base_url)


@pytest.fixture
async def api(ai_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a live server that creates the test app's jobs (tests/support/user_jobs.py)."""
    async with (
        serve(create_app(ai_settings, jobs=user_jobs.app)) as url,
        http_client(url, timeout=30) as client,
    ):
        yield client


@pytest.fixture(scope="module")
async def anthropic_server() -> AsyncIterator[FakeAnthropic]:
    """The fake Anthropic Messages API, one per module."""
    async with FakeAnthropic(api_key=ANTHROPIC_KEY) as fake:
        yield fake


@pytest.fixture
async def claude(anthropic_server: FakeAnthropic) -> AsyncIterator[FakeAnthropic]:
    """The module's fake Anthropic API, reset for this test and left idle by it."""
    anthropic_server.reset()
    yield anthropic_server
    await anthropic_server.wait_until(lambda s: s.in_flight == 0)


@pytest.fixture
def claude_settings(settings: Settings, claude: FakeAnthropic) -> Settings:
    """Settings with the Anthropic provider pointed at the fake (support/anthropic_jobs.py)."""
    return anthropic_settings(settings, claude.base_url)
