"""How long a job will take (server/estimates.py): a create's `estimated_time_sec`, a poll's
`estimated_remaining_sec` and `Retry-After`, and the client's `wait` that follows them, against a
live server. Attempts run for a set time of the test's clock: a gated provider holds each one
while the clock moves, so the mean run the estimates start from is exact."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx

from jobstream.client import AsyncClient
from jobstream.server.app import create_app
from jobstream.server.estimates import Estimates
from jobstream.settings import Settings
from tests.support.api import create, job_body
from tests.support.clock import ManualClock
from tests.support.gated_provider import GatedProvider
from tests.support.http_server import http_client, serve
from tests.support.polling import signalled
from tests.support.workers import (
    create_job,
    manual_clock,
    running_worker,
    wait_for_status,
    wait_idle,
)


async def one_attempt(
    pool: asyncpg.Pool, settings: Settings, clock: ManualClock, seconds: float
) -> uuid.UUID:
    """A job whose one attempt ran `seconds` of `clock`, ended (and counted in metric_totals)."""
    provider = GatedProvider(before=1)
    job_id = await create_job(pool)
    async with running_worker(
        settings, pool=pool, clock=clock, providers={"simulated": provider}
    ) as worker:
        await signalled(provider.waiting.wait(), what="the attempt streams")
        clock.advance(seconds)
        provider.gate.set()
        await wait_for_status(pool, job_id, "succeeded")
        await wait_idle(worker)
    return job_id


async def test_a_fresh_database_has_no_estimate(client: httpx.AsyncClient) -> None:
    job = await create(client)
    assert job["estimated_time_sec"] is None
    polled = await client.get(f"/api/jobs/{job['id']}")
    assert polled.json()["status"] == "queued"
    assert polled.json()["estimated_remaining_sec"] is None
    assert "retry-after" not in polled.headers
    batch = await client.post("/api/jobs/batch", json={"jobs": [job_body(), job_body()]})
    assert [item["estimated_time_sec"] for item in batch.json()["results"]] == [None, None]


async def test_estimates_start_from_the_mean_run_and_the_client_waits_as_advised(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    settings = settings.replace(lease_s=120.0)  # the clock moves 25 s within one attempt
    await one_attempt(pool, settings, clock, 20)
    async with (
        serve(create_app(settings, clock=clock)) as url,
        http_client(url, timeout=30) as http,
    ):
        job = await create(http)
        # Nothing queued before it, so a mean run.
        assert job["estimated_time_sec"] == 20.0
        queued = await http.get(f"/api/jobs/{job['id']}")
        assert queued.json()["estimated_remaining_sec"] == 20.0
        assert queued.headers["retry-after"] == "20"

        provider = GatedProvider(before=1)
        slept: list[float] = []
        polled = asyncio.Event()

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            polled.set()
            await asyncio.sleep(0.01)

        async with (
            running_worker(settings, pool=pool, clock=clock, providers={"simulated": provider}),
            AsyncClient(url, sleep=sleep) as client,
        ):
            await signalled(provider.waiting.wait(), what="the attempt streams")
            clock.advance(5)
            running = await http.get(f"/api/jobs/{job['id']}")
            assert running.json()["status"] == "running"
            assert running.json()["estimated_remaining_sec"] == 15.0
            assert running.headers["retry-after"] == "15"

            waiting = asyncio.create_task(client.wait(job["id"]))
            await signalled(polled.wait(), what="the client polled")
            clock.advance(20)  # past its mean run: a second at least, still
            overdue = await http.get(f"/api/jobs/{job['id']}")
            assert overdue.json()["estimated_remaining_sec"] == 1.0
            assert overdue.headers["retry-after"] == "1"
            provider.gate.set()
            async with asyncio.timeout(10):
                ended = await waiting
        assert ended["status"] == "succeeded"
        # Each pause was what the server advised then, never the client's fixed interval.
        assert slept[0] == 15.0
        assert set(slept) <= {15.0, 1.0}

        done = await http.get(f"/api/jobs/{job['id']}")
        assert done.json()["estimated_remaining_sec"] is None
        assert "retry-after" not in done.headers


async def test_a_batch_queues_each_job_behind_the_ones_before_it(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    await one_attempt(pool, settings, clock, 20)
    async with (
        serve(create_app(settings, clock=clock)) as url,
        http_client(url, timeout=30) as http,
    ):
        later = await create(http, delay_s=100)
        assert later["estimated_time_sec"] == 120.0  # its delay, then a mean run
        batch = await http.post("/api/jobs/batch", json={"jobs": [job_body() for _ in range(3)]})
        # No attempt is running: one slot at least, each job a mean run behind the one before.
        assert [item["estimated_time_sec"] for item in batch.json()["results"]] == [
            20.0,
            40.0,
            60.0,
        ]


async def test_inputs_are_read_once_a_refresh_and_the_mean_run_is_of_recent_attempts(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    now = [0.0]
    estimates = Estimates(pool, clock, refresh_s=1.0, recent_s=300.0, monotonic=lambda: now[0])
    assert (await estimates.inputs()).providers == {}
    await one_attempt(pool, settings, clock, 20)
    assert (await estimates.inputs()).providers == {}  # read less than a refresh ago
    now[0] = 1.0
    assert (await estimates.inputs()).providers["simulated"].mean_run_s == 20.0
    await one_attempt(pool, settings, clock, 2)
    now[0] = 301.0
    # The attempts that ended since the newest read at least 300 s old (at 1.0): the second.
    assert (await estimates.inputs()).providers["simulated"].mean_run_s == 2.0
    now[0] = 700.0
    # None ended since the read at 301.0: the mean of all, then.
    assert (await estimates.inputs()).providers["simulated"].mean_run_s == 11.0
