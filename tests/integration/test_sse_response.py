"""The SSE response itself over real HTTP: the headers proxies and CDNs need, and the end of a
stream whose client stopped reading (send timeout), with the subscription released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream.server.app import create_app
from jobstream.server.hub import Hub
from jobstream.settings import Settings
from tests.support import attempt_driver as drive
from tests.support.api import create
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually
from tests.support.sse_client import SSE_HEADERS, read_stream
from tests.support.stalled_reader import read_to_end, stalled_reader


def assert_stream_headers(headers: httpx.Headers) -> None:
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    # no-transform: a CDN or proxy must not gzip (and so hold back) the stream.
    assert headers["cache-control"] == "no-cache, no-transform"
    assert headers["x-accel-buffering"] == "no"  # nginx: do not buffer this response


async def test_live_and_replayed_streams_carry_the_headers_proxies_need(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await create(client)
    async with client.stream("GET", job["events_url"], headers=SSE_HEADERS) as live:
        assert live.status_code == 200
        assert_stream_headers(live.headers)
    held = await drive.claim(pool)
    await drive.succeed(pool, held, "")
    replay = await read_stream(client, job["events_url"])
    assert replay.ended and replay.events[-1]["type"] == "done"
    assert_stream_headers(replay.headers)


@pytest.fixture
async def impatient(settings: Settings) -> AsyncIterator[tuple[str, Hub]]:
    """A server that gives a stalled client 0.3 s; a buffer too big to cut anyone off first."""
    app = create_app(
        settings.replace(sse_send_timeout_s=0.3, sse_heartbeat_s=0.2, subscriber_buffer=100_000)
    )
    async with serve(app) as url:
        yield url, app.state.js.hub


async def test_a_client_that_stops_reading_is_ended_by_the_send_timeout(
    impatient: tuple[str, Hub], pool: asyncpg.Pool
) -> None:
    url, hub = impatient
    async with http_client(base_url=url, timeout=10) as client:
        job = await create(client)
        held = await drive.claim(pool)
        healthy = asyncio.create_task(read_stream(client, job["events_url"]))
        stalled = stalled_reader(url, job["events_url"])
        try:
            await eventually(_count(hub), lambda n: n == 2, what="both streams follow the job")
            # Big events fill the stalled client's socket; its send then blocks past 0.3 s.
            chunk, sent = "x" * 16_000, []
            for _ in range(400):
                await drive.tokens(pool, held, [chunk])
                sent.append(chunk)
                if hub.subscribers < 2:
                    break
            await eventually(_count(hub), lambda n: n == 1, what="the stalled stream ends")
            assert hub.cut_off == 0  # ended by its send timeout, not by overflowing its buffer
            await drive.succeed(pool, held, "".join(sent))
            got = await asyncio.wait_for(healthy, 30)
            assert got.events[-1]["type"] == "done"  # the reader that keeps up is not affected
            rest = await asyncio.wait_for(asyncio.to_thread(read_to_end, stalled), 30)
            assert b"event: token" in rest and b"event: done" not in rest
        finally:
            stalled.close()
            healthy.cancel()


def _count(hub: Hub) -> Any:
    async def followers() -> int:
        return hub.subscribers

    return followers
