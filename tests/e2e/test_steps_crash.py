"""A worker killed with SIGKILL in the middle of a job of durable steps
(tests/support/user_jobs.py): the next attempt replays the finished steps and calls the provider
only for the rest; followers through the crash end with exactly the result's text; each call is
costed and the tenant charged once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import asyncpg
import pytest

from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.http_server import http_client, serve
from tests.support.openai_jobs import (
    KEY,
    MODEL,
    openai_settings,
    price,
    tenant_money,
)
from tests.support.polling import eventually
from tests.support.processes import Processes
from tests.support.sse_client import read_stream, reassemble
from tests.support.user_jobs import app
from tests.support.workers import attempt_rows, wait_for_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def worker_env(database_url: str, fake: FakeOpenAI, name: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JOBSTREAM_APP": "tests.support.user_jobs:app",
        "JOBSTREAM_WORKER_ID": name,
        "JOBSTREAM_POLL_INTERVAL_S": "0.1",
        "JOBSTREAM_LEASE_S": "1",
        "JOBSTREAM_BACKOFF_BASE_S": "0",
        "JOBSTREAM_BACKOFF_MAX_S": "0",
        "JOBSTREAM_OPENAI_BASE_URL": fake.base_url,
        "JOBSTREAM_OPENAI_API_KEY": KEY,
        "JOBSTREAM_OPENAI_MODEL": MODEL,
    }


@pytest.mark.parametrize("job", ["three_steps", "fan_out"])
async def test_kill_9_mid_call_replays_the_finished_steps_and_calls_only_the_rest(
    process_group: Processes,
    database_url: str,
    settings: Settings,
    pool: asyncpg.Pool,
    fake: FakeOpenAI,
    job: str,
) -> None:
    # The third request hangs until its worker dies; every later one answers.
    fake.push(Reply(), Reply(), Reply(kind="hang", after_tokens=2))
    server_settings = openai_settings(settings, fake.base_url)
    async with (
        serve(create_app(server_settings, jobs=app)) as url,
        http_client(base_url=url, timeout=30) as client,
    ):
        created = await client.post("/api/jobs", json={"job": job, "input": {"topic": "crash"}})
        assert created.status_code == 202, created.text
        job_id = uuid.UUID(created.json()["id"])
        followers = [
            asyncio.create_task(read_stream(client, created.json()["events_url"])) for _ in range(2)
        ]
        first = process_group.spawn("worker", worker_env(database_url, fake, "first"))
        await fake.wait_until(lambda s: s.requests == 3 and s.in_flight == 1, within_s=30)
        # The two answered calls' steps journaled (at once, in fan_out: one may lag its answer).
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM job_steps WHERE job_id = $1", job_id),
            lambda n: n == 2,
            what="two steps journaled",
        )
        first.kill()  # SIGKILL, in the middle of the third call
        await fake.wait_until(lambda s: s.in_flight == 0)
        process_group.spawn("worker", worker_env(database_url, fake, "second"))
        row = await wait_for_status(pool, job_id, "succeeded", timeout_s=30)
        streams = await asyncio.gather(*followers)
    records = fake.stats().records
    # One request for each finished step, two for the one the crash cut.
    hung = records[2].prompt.split()[0]
    assert len(records) == 4 and records[3].prompt.split()[0] == hung
    assert len({r.prompt for r in records[:3]}) == 3
    text = row["result"]["text"]
    for stream in streams:
        assert stream.ended and reassemble(stream.events) == text
    lost, won = await attempt_rows(pool, job_id)
    assert (lost["outcome"], won["outcome"]) == ("lost", "succeeded")
    calls = [price(r.billed_prompt_tokens, r.tokens_sent) for r in records]
    # The lost attempt recorded its two finished calls (the one it died in is known to nobody:
    # flagged unknown); the accepted one its own call.
    assert lost["cost_usd"] == calls[0] + calls[1] and not lost["cost_known"]
    assert won["cost_usd"] == calls[3]
    # Charged once, for the calls the result is made of.
    assert row["charged_usd"] == calls[0] + calls[1] + calls[3]
    assert await tenant_money(pool) == (Decimal(0), row["charged_usd"])


async def test_the_job_survives_its_worker_and_the_http_followers_reconnect(
    process_group: Processes, database_url: str, settings: Settings, fake: FakeOpenAI
) -> None:
    """A reader that reconnects mid-way with Last-Event-ID gets the rest, nothing twice."""
    fake.push(Reply(token_delay_s=0.05, tokens=12), Reply(), Reply())
    async with (
        serve(create_app(openai_settings(settings, fake.base_url), jobs=app)) as url,
        http_client(base_url=url, timeout=30) as client,
    ):
        created = await client.post(
            "/api/jobs", json={"job": "three_steps", "input": {"topic": "resume", "max_tokens": 12}}
        )
        events_url = created.json()["events_url"]
        process_group.spawn("worker", worker_env(database_url, fake, "only"))
        head = await read_stream(client, events_url, max_events=4)
        rest = await read_stream(client, events_url, last_event_id=head.last_id)
        final = await client.get(f"/api/jobs/{created.json()['id']}")
    seqs = [e["seq"] for e in head.events + rest.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert reassemble(head.events + rest.events) == final.json()["result"]["text"]
