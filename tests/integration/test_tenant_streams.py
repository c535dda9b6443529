"""Each tenant's open streams are capped per server process (JOBSTREAM_TENANT_MAX_STREAMS), over
real HTTP: a tenant at its cap is refused 429 whichever way it asks (its key, a job's events
token, /v1, a long-poll that waits), another tenant is still served, and every way a stream
ends gives its slot back.

Before: nothing counted streams per tenant, so one tenant (or one events token, with no key)
could open streams until the server's connection cap answered everyone 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, cast

import asyncpg
import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from jobstream import sse, tenants
from jobstream.follower import Follower
from jobstream.server.app import create_app
from jobstream.server.stream_slots import RETRY_AFTER_S, StreamSlots
from jobstream.settings import Settings
from tests.support import attempt_driver as drive
from tests.support.api import PROBLEM, create, job_count
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually, signalled
from tests.support.sse_client import SSE_HEADERS, read_stream

CAP = 3
V1_BODY = {"model": "simulated-1", "input": "hello", "simulate": {"tokens": 5}}


@pytest.fixture
def app(settings: Settings) -> Starlette:
    return create_app(settings.replace(tenant_max_streams=CAP))


@pytest.fixture
async def url(app: Starlette) -> AsyncIterator[str]:
    async with serve(app) as base_url:
        yield base_url


def slots(app: Starlette) -> StreamSlots:
    streams: StreamSlots = app.state.js.streams
    return streams


@contextlib.asynccontextmanager
async def tenant(pool: asyncpg.Pool, url: str, name: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the server with a new tenant's key."""
    key = await tenants.create(pool, name)
    async with http_client(url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as http:
        yield http


@pytest.fixture
async def a(pool: asyncpg.Pool, url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with tenant(pool, url, "tenant-a") as http:
        yield http


@pytest.fixture
async def b(pool: asyncpg.Pool, url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with tenant(pool, url, "tenant-b") as http:
        yield http


@pytest.fixture
async def keyless(url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser's EventSource: no Authorization header, only the token in events_url."""
    async with http_client(url, timeout=30) as http:
        yield http


def plain(job: dict[str, Any]) -> str:
    return f"/api/jobs/{job['id']}/events"


async def first_event(items: AsyncIterator[sse.Item]) -> dict[str, Any]:
    """The first event of a served stream's items (the `retry:` frame before it is skipped)."""
    async for item in items:
        if isinstance(item, sse.Message):
            event: dict[str, Any] = orjson.loads(item.data)
            return event
    raise AssertionError("the stream ended before its first event")


def items_of(stack: AsyncExitStack, response: httpx.Response) -> AsyncIterator[sse.Item]:
    """The response's SSE items, closed with `stack`: left to the garbage collector, the
    reading generators close the connection under the stream."""
    items = cast(AsyncGenerator[sse.Item, None], sse.items(response))
    stack.push_async_callback(items.aclose)
    return items


async def hold(
    stack: AsyncExitStack,
    client: httpx.AsyncClient,
    path: str,
    *,
    method: str = "GET",
    json: dict[str, Any] | None = None,
) -> httpx.Response:
    """A stream held open until `stack` closes, once its first event has arrived (served, and
    counted: its slot is taken before its response starts)."""
    response = await stack.enter_async_context(
        client.stream(method, path, headers=SSE_HEADERS, json=json)
    )
    assert response.status_code == 200, (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    await first_event(items_of(stack, response))
    return response


async def answer(
    client: httpx.AsyncClient, path: str, *, method: str = "GET", **options: Any
) -> httpx.Response:
    """The response's head and, unless it is a stream (200), its body: a stream that should
    have been refused is not read for ever."""
    async with client.stream(method, path, **options) as response:
        if response.status_code != 200 or "json" in response.headers.get("content-type", ""):
            await response.aread()
        return response


def assert_too_many_streams(response: httpx.Response) -> None:
    assert response.status_code == 429, response.status_code
    assert response.headers["retry-after"] == str(RETRY_AFTER_S)
    # A refused stream's connection is not kept alive to hold a place under the connection cap.
    assert response.headers["connection"] == "close"
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "/problems/too-many-streams"


def assert_v1_too_many_streams(response: httpx.Response) -> None:
    assert response.status_code == 429, response.status_code
    assert response.headers["retry-after"] == str(RETRY_AFTER_S)
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_streams")


async def refused_total(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    family = next(
        f for f in text_string_to_metric_families(text) if f.name == "jobstream_streams_refused"
    )
    return family.samples[0].value


async def test_a_tenant_at_its_cap_is_refused_429_and_another_tenant_is_served(
    app: Starlette,
    a: httpx.AsyncClient,
    b: httpx.AsyncClient,
    keyless: httpx.AsyncClient,
) -> None:
    # Queued jobs (no worker here): their streams stay open, waiting.
    jobs = [await create(a) for _ in range(CAP + 1)]
    spare = jobs[CAP]
    async with AsyncExitStack() as held:
        first = await hold(held, a, plain(jobs[0]))
        for job in jobs[1:CAP]:
            await hold(held, a, plain(job))
        assert slots(app).held("tenant-a") == CAP

        # A's next stream, with its key, with the job's events token alone, or a long-poll that
        # waits: each is refused, before anything is streamed.
        assert_too_many_streams(await answer(a, plain(spare), headers=SSE_HEADERS))
        assert_too_many_streams(await answer(keyless, spare["events_url"], headers=SSE_HEADERS))
        assert_too_many_streams(await answer(a, plain(spare), params={"wait": 5}))
        # A poll that does not wait holds nothing, and is served.
        polled = await a.get(plain(spare))
        assert polled.status_code == 200 and polled.json()["events"][0]["type"] == "status"
        assert await refused_total(a) == 3

        # Tenant B is served: 200, an event stream, its first event.
        job_b = await create(b)
        async with AsyncExitStack() as b_held:
            streamed = await b_held.enter_async_context(
                b.stream("GET", plain(job_b), headers=SSE_HEADERS)
            )
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
            assert (await first_event(items_of(b_held, streamed)))["type"] == "status"

        # One of A's streams closes: A may open another.
        await first.aclose()

        async def reopened() -> int:
            async with a.stream("GET", plain(spare), headers=SSE_HEADERS) as response:
                return response.status_code

        await eventually(reopened, lambda status: status == 200, what="A's stream is served")
    await eventually(
        lambda: _held(app, "tenant-a"), lambda n: n == 0, what="A's streams are given back"
    )


async def test_streams_opened_by_token_and_under_v1_count_against_the_jobs_tenant(
    app: Starlette,
    pool: asyncpg.Pool,
    a: httpx.AsyncClient,
    b: httpx.AsyncClient,
    keyless: httpx.AsyncClient,
) -> None:
    jobs = [await create(a) for _ in range(2)]
    async with AsyncExitStack() as held:
        await hold(held, a, plain(jobs[0]))
        # A stream opened with the token alone names no tenant: it is A's, the job's owner.
        await hold(held, keyless, jobs[1]["events_url"])
        # /v1's stream of a create is A's too.
        await hold(held, a, "/v1/responses", method="POST", json={**V1_BODY, "stream": True})
        assert slots(app).held("tenant-a") == CAP

        made = await job_count(pool)
        retrieve = f"/v1/responses/resp_{jobs[0]['id'].replace('-', '')}"
        assert_v1_too_many_streams(await answer(a, retrieve, params={"stream": "true"}))
        # A create that would stream, or wait for its job's end, is refused before its job is
        # made: the SDKs retry a 429, and a retry must not leave a job behind for each try.
        for body in ({**V1_BODY, "stream": True}, V1_BODY):
            assert_v1_too_many_streams(await answer(a, "/v1/responses", method="POST", json=body))
        assert await job_count(pool) == made
        # A background create holds nothing: it is answered at once.
        background = await a.post("/v1/responses", json={**V1_BODY, "background": True})
        assert background.status_code == 200, background.text

        # B's /v1 stream is served.
        async with AsyncExitStack() as b_held:
            streamed = await b_held.enter_async_context(
                b.stream("POST", "/v1/responses", json={**V1_BODY, "stream": True})
            )
            assert streamed.status_code == 200
            assert (await first_event(items_of(b_held, streamed)))["type"] == "response.created"


async def test_the_follower_waits_out_retry_after_instead_of_giving_up(
    a: httpx.AsyncClient,
) -> None:
    jobs = [await create(a) for _ in range(CAP + 1)]
    retries: list[tuple[float, str]] = []
    refused = asyncio.Event()

    def on_retry(delay_s: float, reason: str) -> None:
        retries.append((delay_s, reason))
        refused.set()

    async with AsyncExitStack() as held:
        for job in jobs[:CAP]:
            await hold(held, a, plain(job))
        # jobstream's own reader (`jobstream follow`, the client's stream): a 429 is for now.
        follower = Follower(a, jobs[CAP]["id"], on_retry=on_retry)

        async def follow() -> None:
            async for _ in follower.events():
                return

        reading = asyncio.create_task(follow())
        await signalled(refused.wait(), what="the follower is refused")
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    (delay_s, reason), *_ = retries
    assert delay_s >= RETRY_AFTER_S and reason.startswith("429")


async def test_every_way_a_stream_ends_gives_its_slot_back(
    app: Starlette, settings: Settings, pool: asyncpg.Pool
) -> None:
    headers = {"Authorization": f"Bearer {await tenants.create(pool, 'tenant-a')}"}
    # The readers' client outlives the server: its last stream is open when the server stops.
    async with http_client(timeout=30, headers=headers) as a:
        async with serve(app) as url, http_client(url, headers=headers) as creator:
            ending = await create(creator)
            claimed = await drive.claim(pool)  # the only queued job: this one, now running
            assert str(claimed.job_id) == ending["id"]
            left, kept = await create(creator), await create(creator)
            async with AsyncExitStack() as held:
                ends = asyncio.create_task(read_stream(a, url + plain(ending)))
                leaves = await hold(held, a, url + plain(left))
                stays = asyncio.create_task(read_stream(a, url + plain(kept)))
                await eventually(lambda: _held(app, "tenant-a"), lambda n: n == 3, what="3 open")

                # The job ends: the server ends its stream after `done`.
                await drive.succeed(pool, claimed, "done")
                assert (await ends).ended
                await eventually(lambda: _held(app, "tenant-a"), lambda n: n == 2, what="ended")
                # The client hangs up.
                await leaves.aclose()
                await eventually(lambda: _held(app, "tenant-a"), lambda n: n == 1, what="gone")
        # The server stopped with the last one open: it ended that stream, and gave it back.
        assert (await stays).ended
        assert slots(app).held("tenant-a") == 0


async def _held(app: Starlette, tenant_id: str) -> int:
    return slots(app).held(tenant_id)
