"""The hub under stress: a lost LISTEN connection, many readers of one job, a reader that stalls."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import events, token_appends
from jobstream.claims import Claimed
from jobstream.server.app import create_app
from jobstream.server.hub import Hub
from jobstream.settings import Settings
from jobstream.sql import queries
from tests.support import attempt_driver as drive
from tests.support.api import create, until_followers
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually, signalled
from tests.support.sse_client import Received, read_stream, reassemble
from tests.support.stalled_reader import read_to_end, stalled_reader


@dataclass
class Served:
    url: str
    hub: Hub
    client: httpx.AsyncClient


@pytest.fixture
def hub_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The test settings, with what a test passes through `indirect` parametrization."""
    return settings.replace(**getattr(request, "param", {}))


@pytest.fixture
async def served(hub_settings: Settings) -> AsyncIterator[Served]:
    app = create_app(hub_settings)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with (
        serve(app) as url,
        http_client(base_url=url, timeout=30, limits=limits) as client,
    ):
        yield Served(url, app.state.js.hub, client)


async def follow_one(
    served: Served, pool: asyncpg.Pool, *, max_events: int | None = None
) -> tuple[Claimed, asyncio.Task[Received]]:
    """A job created and claimed, and one SSE reader of it from its start, followed here."""
    job = await create(served.client)
    held = await drive.claim(pool)
    read = read_stream(served.client, job["events_url"], max_events=max_events)
    reader = asyncio.create_task(read)
    await until_followers(served.hub, 1)
    return held, reader


async def hub_backend(pool: asyncpg.Pool) -> int | None:
    pid: int | None = await pool.fetchval(
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name = 'jobstream-hub' AND datname = current_database()"
    )
    return pid


@pytest.mark.parametrize("hub_settings", [{"hub_recheck_s": 60.0}], indirect=True)
async def test_streams_go_on_when_the_listen_connection_is_killed(
    served: Served, pool: asyncpg.Pool
) -> None:
    # A 60 s re-check cannot deliver in time: only the reconnect and its re-read can.
    held, reader = await follow_one(served, pool)
    await drive.tokens(pool, held, drive.count_tokens(0, 10))
    old = await hub_backend(pool)
    assert old is not None
    assert await pool.fetchval("SELECT pg_terminate_backend($1)", old)
    # Appended while the listener is down or reconnecting: its NOTIFY is lost.
    await drive.tokens(pool, held, drive.count_tokens(10, 20))
    await eventually(
        lambda: hub_backend(pool), lambda pid: pid not in (None, old), what="the hub reconnects"
    )
    await drive.tokens(pool, held, drive.count_tokens(20, 30))
    await drive.succeed(pool, held, "".join(drive.count_tokens(0, 30)))
    got = await asyncio.wait_for(reader, 10)
    seqs = [e["seq"] for e in got.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert reassemble(got.events) == "".join(drive.count_tokens(0, 30))


async def test_two_hundred_readers_of_one_job_get_every_event_from_one_read_per_wake_up(
    served: Served, pool: asyncpg.Pool
) -> None:
    job = await create(served.client)
    readers = [
        asyncio.create_task(read_stream(served.client, job["events_url"])) for _ in range(200)
    ]
    await until_followers(served.hub, 200)
    reads_before = served.hub.reads
    held = await drive.claim(pool)
    flushes = 30
    for i in range(flushes):
        await drive.tokens(pool, held, drive.count_tokens(i, i + 1))
    text = "".join(drive.count_tokens(0, flushes))
    await drive.succeed(pool, held, text)
    received = await asyncio.wait_for(asyncio.gather(*readers), 60)
    expected = list(range(1, flushes + 5 + 1))  # queued, reset, running, tokens, usage, done
    for got in received:
        assert [e["seq"] for e in got.events] == expected
        assert reassemble(got.events) == text
    # Fan-out: at most two reads per append (a NOTIFY may land while the read that will see its
    # events is under way, then one more read finds nothing), never one per reader: 200 x 32.
    appends = flushes + 2  # the claim, the tokens, the success
    assert served.hub.reads - reads_before <= 2 * appends + 5


@pytest.mark.parametrize("hub_settings", [{"subscriber_buffer": 8}], indirect=True)
async def test_a_stalled_reader_is_cut_off_and_slows_nobody(
    served: Served, pool: asyncpg.Pool
) -> None:
    job = await create(served.client)
    held = await drive.claim(pool)
    healthy = [asyncio.create_task(read_stream(served.client, job["events_url"])) for _ in range(3)]
    stalled = stalled_reader(served.url, job["events_url"])
    try:
        await until_followers(served.hub, 4)
        # Big events fill the stalled reader's socket, then its buffer of 8: it is cut off.
        chunk = "x" * 16_000
        sent: list[str] = []
        for _ in range(400):
            await drive.tokens(pool, held, [chunk])
            sent.append(chunk)
            if served.hub.cut_off:
                break
        assert served.hub.cut_off == 1
        await until_followers(served.hub, 3)
        await drive.succeed(pool, held, "".join(sent))
        for got in await asyncio.wait_for(asyncio.gather(*healthy), 30):
            assert got.events[-1]["type"] == "done"
            assert reassemble(got.events) == "".join(sent)
        # The stalled reader, reading at last, finds its stream ended before `done`.
        rest = await asyncio.wait_for(asyncio.to_thread(read_to_end, stalled), 30)
        assert b"event: token" in rest
        assert b"event: done" not in rest
    finally:
        stalled.close()


class _GatedRecheck:
    """The pool, except that the hub's re-check query waits at a gate the test opens."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        if query == queries.JOBS_LAST_SEQ:
            self.entered.set()
            await self.gate.wait()
        return await self._pool.fetch(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self._pool.fetchval(query, *args)


async def test_a_job_followed_during_a_recheck_is_not_closed_as_gone(
    client: httpx.AsyncClient, pool: asyncpg.Pool, database_url: str
) -> None:
    first, second = await create(client), await create(client)
    gated = _GatedRecheck(pool)
    hub = Hub(
        database_url=database_url,
        pool=gated,  # type: ignore[arg-type]
        recheck_s=0.05,
        probe_s=10.0,
        buffer=16,
    )
    await hub.start()
    try:
        early = await hub.subscribe(uuid.UUID(first["id"]))
        await signalled(gated.entered.wait(), what="the re-check reads the followed jobs")
        gated.entered.clear()
        # Followed after the re-check read its list: the re-check has no row for it.
        late = await hub.subscribe(uuid.UUID(second["id"]))
        gated.gate.set()
        await signalled(gated.entered.wait(), what="the re-check finishes a round")
        assert early.reason is None
        assert late.reason is None
    finally:
        await hub.stop()


async def test_a_start_up_that_fails_leaves_no_hub_task_running(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Building the providers failed after the hub had started: its listener and re-check went
    # on reconnecting to a database the server had given up on.
    def broken(_settings: Settings) -> Any:
        raise ValueError("bad provider configuration")

    monkeypatch.setattr("jobstream.server.app.build_providers", broken)
    app = create_app(settings)
    with pytest.raises(ValueError, match="bad provider configuration"):
        async with app.router.lifespan_context(app):
            pass
    hub_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("hub-")]
    assert hub_tasks == []


async def test_news_of_many_jobs_in_one_commit_is_read_in_one_statement(
    served: Served, pool: asyncpg.Pool
) -> None:
    # A worker's token write notifies for all of its streams in one commit; the hub read each job
    # on its own, so a thousand followed jobs were a thousand reads a tick.
    jobs = [await create(served.client) for _ in range(20)]
    readers = [
        asyncio.create_task(read_stream(served.client, job["events_url"], max_events=2))
        for job in jobs
    ]
    await until_followers(served.hub, 20)
    reads_before = served.hub.reads
    async with pool.acquire() as conn, conn.transaction():
        for n, job in enumerate(jobs):
            new = [events.NewEvent("token", {"text": f"job {n} "})]
            await events.append(conn, uuid.UUID(job["id"]), 1, new, run_token=None)
    for n, got in enumerate(await asyncio.wait_for(asyncio.gather(*readers), 30)):
        assert [e["type"] for e in got.events] == ["status", "token"]
        assert got.events[1]["text"] == f"job {n} "
    # One read for the twenty jobs; a second if a notification landed after the first began.
    assert served.hub.reads - reads_before <= 2


@pytest.mark.parametrize("hub_settings", [{"hub_recheck_s": 3600.0}], indirect=True)
async def test_one_notification_for_many_jobs_wakes_each_of_them(
    served: Served, pool: asyncpg.Pool, database_url: str
) -> None:
    # A worker's token write of one tick notifies once per hundred jobs ("id:seq,id:seq,...");
    # every job named wakes its followers, as its own notification did. No recheck runs meanwhile.
    jobs = [await create(served.client) for _ in range(3)]
    helds = [await drive.claim(pool) for _ in jobs]
    by_id = {str(h.job_id): h for h in helds}
    readers = [
        asyncio.create_task(read_stream(served.client, job["events_url"], max_events=4))
        for job in jobs
    ]
    await until_followers(served.hub, 3)
    appends = [
        token_appends.TokenAppend(by_id[job["id"]], [f"job {n} "], at=0)
        for n, job in enumerate(jobs)
    ]
    heard: list[str] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("jobstream_events", lambda *args: heard.append(args[3]))
        answers = await token_appends.append_tokens_many(pool, appends)
        assert all(a.held and a.last_seq is not None for a in answers)
        await eventually(lambda: _now(heard), bool, what="the write's notification arrives")
    finally:
        await listener.close()
    assert len(heard) == 1 and len(heard[0].split(",")) == 3
    for n, got in enumerate(await asyncio.wait_for(asyncio.gather(*readers), 30)):
        assert [e["type"] for e in got.events] == ["status", "reset", "status", "token"]
        assert got.events[-1]["text"] == f"job {n} "


@pytest.mark.parametrize("hub_settings", [{"hub_recheck_s": 3600.0}], indirect=True)
async def test_a_notification_wakes_the_jobs_it_names_whatever_else_it_holds(
    served: Served, pool: asyncpg.Pool
) -> None:
    # The hub matches a notification's items to the jobs it follows by their text: items it
    # cannot read, or for jobs nobody here follows, are passed over, and the rest still wake.
    held, reader = await follow_one(served, pool, max_events=4)
    # An event committed without a notification of its own: only the one below announces it.
    async with pool.acquire() as conn, conn.transaction():
        seq = await conn.fetchval(
            "UPDATE jobs SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq",
            held.job_id,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, seq, attempt, type, data)"
            " VALUES ($1, $2, $3, 'token', '{\"text\": \"announced \"}')",
            held.job_id, seq, held.attempt,
        )  # fmt: skip
    payload = f"not-a-job,{uuid.uuid4()}:7,{held.job_id}:x,{held.job_id}:{seq}"
    await pool.execute("SELECT pg_notify('jobstream_events', $1)", payload)
    got = await asyncio.wait_for(reader, 30)
    assert [e["type"] for e in got.events] == ["status", "reset", "status", "token"]
    assert got.events[-1]["text"] == "announced "


async def _now(values: list[str]) -> list[str]:
    return values
