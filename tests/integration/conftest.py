"""Integration fixtures: the HTTP API on a real uvicorn, and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from jobstream.settings import Settings
from server.app import create_app
from tests.support.http_server import serve


@pytest.fixture
async def base_url(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings)) as url:
        yield url


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        yield http
