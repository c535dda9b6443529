"""GET /api/jobs/{id}/events over real HTTP: SSE framing, cursors, errors, tokens, long-poll."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette

from jobstream.server.app import create_app
from jobstream.server.hub import Hub
from jobstream.server.stream_tokens import StreamTokens
from jobstream.settings import Settings
from tests.support import attempt_driver as drive
from tests.support.api import PROBLEM, create, until_followers
from tests.support.http_server import http_client, serve
from tests.support.sse_client import SSE_HEADERS, read_stream, reassemble


async def finished_job(client: httpx.AsyncClient, pool: asyncpg.Pool) -> dict[str, Any]:
    """A job that ran one attempt of five counted tokens and succeeded."""
    job = await create(client)
    held = await drive.claim(pool)
    for i in range(5):
        await drive.tokens(pool, held, drive.count_tokens(i, i + 1))
    await drive.succeed(pool, held, "0 1 2 3 4 ")
    return job


def plain(job: dict[str, Any]) -> str:
    """The events URL without a token (a client that authenticates otherwise)."""
    return f"/api/jobs/{job['id']}/events"


async def test_a_finished_job_replays_whole_and_the_stream_ends(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await finished_job(client, pool)
    got = await read_stream(client, job["events_url"])
    assert got.status == 200
    assert got.ended
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-cache, no-transform"
    assert got.headers["x-accel-buffering"] == "no"
    assert got.first_item is not None and got.retry_ms == 1000  # `retry:` comes first
    types = [e["type"] for e in got.events]
    assert types == ["status", "reset", "status", *["token"] * 5, "usage", "done"]
    assert [e["seq"] for e in got.events] == list(range(1, 11))
    assert got.ids == [str(e["seq"]) for e in got.events]
    assert all(e["attempt"] == (0 if i == 0 else 1) for i, e in enumerate(got.events))
    assert reassemble(got.events) == got.events[-1]["result"]["text"] == "0 1 2 3 4 "


async def test_cursor_from_last_event_id_then_after(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await finished_job(client, pool)
    by_header = await read_stream(client, plain(job), last_event_id="7")
    assert [e["seq"] for e in by_header.events] == [8, 9, 10]
    by_query = await read_stream(client, plain(job) + "?after=8")
    assert [e["seq"] for e in by_query.events] == [9, 10]
    # The header wins: it is what EventSource sends when it reconnects to the same URL.
    both = await read_stream(client, plain(job) + "?after=2", last_event_id="9")
    assert [e["seq"] for e in both.events] == [10]
    # Everything seen, `done` included: 204 tells an EventSource to stop reconnecting.
    assert (await read_stream(client, plain(job), last_event_id="10")).status == 204


@pytest.mark.parametrize("accept", ["text/event-stream", "application/json"])
async def test_unknown_job_is_a_404_problem(client: httpx.AsyncClient, accept: str) -> None:
    for job_id in (str(uuid.uuid4()), "not-a-uuid"):
        response = await client.get(f"/api/jobs/{job_id}/events", headers={"Accept": accept})
        assert response.status_code == 404
        assert response.headers["content-type"] == PROBLEM


async def test_malformed_cursor_or_wait_is_a_400_problem(client: httpx.AsyncClient) -> None:
    job = await create(client)
    cases: list[tuple[str, dict[str, str]]] = [
        ("?after=-1", SSE_HEADERS),
        ("?after=abc", SSE_HEADERS),
        ("?after=%D9%A1%D9%A2", SSE_HEADERS),  # digits, but not ASCII ones
        ("?after=", {}),
        ("?after=99999999999999999999", {}),
        ("", {**SSE_HEADERS, "Last-Event-ID": "12x"}),
        ("?wait=31", {}),
        ("?wait=nan", {}),
        ("?wait=soon", {}),
    ]
    for query, headers in cases:
        response = await client.get(plain(job) + query, headers=headers)
        assert response.status_code == 400, (query, headers)
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["type"] in ("/problems/invalid-cursor", "/problems/invalid-wait")


async def test_tokens_are_checked_when_present(client: httpx.AsyncClient) -> None:
    job, other = await create(client), await create(client)
    other_token = other["events_url"].split("token=")[1]
    ok = await client.get(job["events_url"])
    assert ok.status_code == 200
    assert (await client.get(plain(job))).status_code == 200  # no token: not enforced yet
    for bad in (other_token, "garbage", "1.abc", other_token.split(".")[0] + ".x", ""):
        response = await client.get(plain(job), params={"token": bad}, headers=SSE_HEADERS)
        assert response.status_code == 404, bad
        assert response.headers["content-type"] == PROBLEM


async def test_an_expired_token_is_refused(client: httpx.AsyncClient, settings: Settings) -> None:
    job = await create(client)
    # Signed with the server's key, but an hour past its expiry.
    long_ago = StreamTokens(settings.secret_key, 3600, now=lambda: time.time() - 7200)
    response = await client.get(plain(job), params={"token": long_ago.issue(job["id"], 1)})
    assert response.status_code == 404
    fresh = StreamTokens(settings.secret_key, 3600)
    assert (await client.get(plain(job), params={"token": fresh.issue(job["id"], 1)})).is_success


async def test_tokens_never_reach_the_access_log(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    job = await create(client)
    token = job["events_url"].split("token=")[1]
    with caplog.at_level("INFO", logger="uvicorn.access"):
        await client.get(job["events_url"])
        await client.get(job["events_url"] + "&after=0")
        # Regression: the server reads `%74oken` as `token`, and the log showed it whole.
        await client.get(job["events_url"].replace("token=", "%74oken="))
    access = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any("/events?token=[redacted]" in line for line in access), access
    assert any("%74oken=[redacted]" in line for line in access), access
    assert not any(token in line for line in access)


async def test_a_pruned_cursor_gets_resync(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    job = await finished_job(client, pool)
    # What a retention janitor would do: the oldest events are gone.
    await pool.execute(
        "DELETE FROM job_events WHERE job_id = $1 AND seq <= 4", uuid.UUID(job["id"])
    )
    got = await read_stream(client, plain(job), last_event_id="2")
    assert got.events[0]["type"] == "resync"
    assert got.events[0]["first_seq"] == 5
    assert got.ids[0] == "4"  # reconnecting after it does not resync again
    assert [e["seq"] for e in got.events[1:]] == list(range(5, 11))
    fine = await read_stream(client, plain(job), last_event_id="4")
    assert fine.events[0]["type"] == "token"
    polled = (await client.get(plain(job), params={"after": "0"})).json()
    assert polled["events"][0]["type"] == "resync"


async def test_poll_returns_at_once_when_events_exist(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await finished_job(client, pool)
    first = (await client.get(plain(job), params={"after": "0", "wait": "30"})).json()
    assert [e["seq"] for e in first["events"]] == list(range(1, 11))
    assert first["next_after"] == 10 and first["status"] == "succeeded" and first["done"]
    rest = (await client.get(plain(job), params={"after": "10", "wait": "30"})).json()
    assert rest == {"events": [], "next_after": 10, "status": "succeeded", "done": True}


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The app itself (to look at its hub) and a client of it on a real uvicorn."""
    app = create_app(settings)
    async with serve(app) as url, http_client(base_url=url) as client:
        yield app, client


async def test_a_cursor_past_the_end_of_the_log_waits_for_events_after_it(
    app_client: tuple[Starlette, httpx.AsyncClient], pool: asyncpg.Pool
) -> None:
    # docs/design.md, invariant 7: any cursor, even one the log has not reached yet.
    app, client = app_client
    hub: Hub = app.state.js.hub
    job = await create(client)
    reader = asyncio.create_task(read_stream(client, plain(job), last_event_id="5"))
    beyond = asyncio.create_task(read_stream(client, plain(job), last_event_id="99"))

    await until_followers(hub, 2, what="both readers follow the job")
    held = await drive.claim(pool)
    await drive.tokens(pool, held, ["a", "b", "c"])
    await drive.succeed(pool, held, "abc")
    got = await asyncio.wait_for(reader, 10)
    assert [e["seq"] for e in got.events] == [6, 7, 8] and got.ended
    # The job ended short of this cursor: the stream ends too, rather than wait forever.
    nothing = await asyncio.wait_for(beyond, 10)
    assert nothing.events == [] and nothing.ended
    assert (await read_stream(client, plain(job), last_event_id="99")).status == 204


async def test_long_poll_wakes_soon_after_a_new_event(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    # The hub's re-read (which catches a lost NOTIFY) is put past the 20 s wait: only the
    # NOTIFY can answer the long-poll well before its end.
    app = create_app(settings.replace(hub_recheck_s=60))
    async with serve(app) as url, http_client(base_url=url) as client:
        hub: Hub = app.state.js.hub
        job = await create(client)
        held = await drive.claim(pool)
        progress = (await client.get(plain(job), params={"after": "0"})).json()
        assert progress["status"] == "running" and not progress["done"]
        cursor = progress["next_after"]
        waiting = asyncio.create_task(
            client.get(plain(job), params={"after": str(cursor), "wait": "20"})
        )

        await until_followers(hub, 1, what="the long-poll is parked on the hub")
        appended_at = time.monotonic()
        await drive.tokens(pool, held, ["hello"])
        answer = (await asyncio.wait_for(waiting, 15)).json()
        woke_after = time.monotonic() - appended_at
    assert [e["text"] for e in answer["events"]] == ["hello"]
    assert answer["next_after"] == cursor + 1 and not answer["done"]
    assert woke_after < 10, woke_after  # woken by the NOTIFY, not by the end of the wait


async def test_long_poll_times_out_empty(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    job = await create(client)
    started = time.monotonic()
    answer = (await client.get(plain(job), params={"after": "1", "wait": "0.3"})).json()
    assert time.monotonic() - started >= 0.3
    assert answer == {"events": [], "next_after": 1, "status": "queued", "done": False}


@pytest.fixture
async def quiet_app(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings.replace(sse_heartbeat_s=0.2))) as url:
        yield url


async def test_heartbeats_arrive_when_nothing_happens(quiet_app: str, pool: asyncpg.Pool) -> None:
    async with http_client(base_url=quiet_app) as client:
        job = await create(client)
        got = await read_stream(client, job["events_url"], max_events=1)
        assert [e["type"] for e in got.events] == ["status"]
        async with client.stream("GET", job["events_url"], headers=SSE_HEADERS) as response:
            chunks = response.aiter_text()
            seen = ""
            while seen.count(": heartbeat") < 2:
                seen += await asyncio.wait_for(anext(chunks), 2)


async def test_server_shutdown_ends_open_streams_promptly(settings: Settings) -> None:
    app = create_app(settings)
    async with http_client(timeout=10) as client:
        # uvicorn's graceful timeout is far past the bound: streams left open would run it out.
        async with serve(app, timeout_graceful_shutdown=30) as url:
            hub: Hub = app.state.js.hub
            async with http_client(base_url=url) as creator:
                job = await create(creator)
            readers = [
                asyncio.create_task(read_stream(client, url + job["events_url"])) for _ in range(3)
            ]
            await until_followers(hub, 3, what="three streams follow the job")
            stopping_at = time.monotonic()
        stopped_after = time.monotonic() - stopping_at
        received = await asyncio.gather(*readers)
    assert all(got.ended for got in received)  # ended by the server, cleanly, not cut
    assert stopped_after < 10, stopped_after  # ended at once, not at the graceful timeout


async def test_a_live_stream_ends_when_a_full_page_ends_with_done(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # Regression: when a read returned exactly a page (1,000 events) ending with `done`, the
    # next read was empty and the stream waited on the hub for ever. The job finished between
    # the stream's status check (still running: a live stream) and its first read.
    job = await create(client)
    job_id = uuid.UUID(job["id"])
    await pool.execute(
        "INSERT INTO job_events (job_id, seq, attempt, type, data)"
        " SELECT $1, g, 1, 'token', jsonb_build_object('text', g::text || ' ')"
        " FROM generate_series(2, 999) g",
        job_id,
    )
    await pool.execute(
        "INSERT INTO job_events (job_id, seq, attempt, type, data) VALUES ($1, 1000, 1, 'done',"
        ' \'{"status": "succeeded", "result": {"text": "t"}}\')',
        job_id,
    )
    await pool.execute("UPDATE jobs SET status = 'running', last_seq = 1000 WHERE id = $1", job_id)
    async with asyncio.timeout(10):
        got = await read_stream(client, plain(job))
    assert got.events[-1]["type"] == "done" and got.events[-1]["seq"] == 1000
