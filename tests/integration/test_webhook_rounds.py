"""Webhooks one round at a time (issue 9, "Hardening": webhooks): a WebhookSender driven
directly with a manual clock, against failing and hanging lookups, a receiver that trickles past
the deadline, and senders that race; and webhook addresses refused at create."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from jobstream.server.app import create_app
from jobstream.settings import Settings
from jobstream.worker.webhooks import WebhookSender
from tests.support.api import PROBLEM
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually
from tests.support.resolver import Resolver, fake_resolver
from tests.support.webhook_outbox import pending_delivery, the_delivery
from tests.support.webhook_receiver import Receiver, webhook_receiver
from tests.support.workers import manual_clock


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    with fake_resolver(monkeypatch) as fake:
        yield fake


async def test_a_host_whose_lookup_fails_is_retried_with_backoff_not_given_up(
    pool: asyncpg.Pool, hook_settings: Settings, resolver: Resolver
) -> None:
    resolver.failing.add("hooks.example.com")
    strict = hook_settings.replace(
        webhook_allow_private=False,
        webhook_backoff_base_s=60.0,
        webhook_backoff_max_s=60.0,
        webhook_max_attempts=2,
    )
    clock = manual_clock()
    job_id = await pending_delivery(pool, "https://hooks.example.com/jobstream", clock)
    webhooks = WebhookSender(pool, strict, clock=clock, rng=random.Random(9))
    async with webhooks.client() as http:
        assert await webhooks.deliver_due(http) == 1
        row = await the_delivery(pool, job_id)
        # A resolver outage heals: the delivery waits out a backoff instead of being dropped.
        assert (row["status"], row["attempts"], row["last_status_code"]) == ("pending", 1, None)
        assert "'hooks.example.com' does not resolve" in row["last_error"]
        expected_delay = random.Random(9).uniform(0, 60.0)
        assert (row["next_attempt_at"] - clock.now()).total_seconds() == pytest.approx(
            expected_delay, abs=0.001
        )
        assert await webhooks.deliver_due(http) == 0  # not due before its backoff ends
        clock.advance(60)
        assert await webhooks.deliver_due(http) == 1
    row = await the_delivery(pool, job_id)
    # Still failing at the last attempt: failed, as any other failing receiver.
    assert (row["status"], row["attempts"]) == ("failed", 2)
    assert resolver.lookups.count("hooks.example.com") == 2


async def test_a_lookup_that_hangs_ends_at_the_deadline_and_is_retried(
    pool: asyncpg.Pool, hook_settings: Settings, resolver: Resolver
) -> None:
    resolver.hanging.add("hooks.example.com")
    strict = hook_settings.replace(webhook_allow_private=False, webhook_timeout_s=0.3)
    clock = manual_clock()
    job_id = await pending_delivery(pool, "https://hooks.example.com/jobstream", clock)
    webhooks = WebhookSender(pool, strict, clock=clock, rng=random.Random(9))
    async with webhooks.client() as http, asyncio.timeout(5):
        assert await webhooks.deliver_due(http) == 1
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert "did not resolve within 0.3 s" in row["last_error"]


@asynccontextmanager
async def trickling_receiver() -> AsyncIterator[str]:
    """A receiver that answers 200 at once, then its body a byte every 50 ms for 4 s: no gap
    is long enough for httpx's per-read timeout, the whole is far past the deadline."""

    async def hook(request: Request) -> Response:
        async def drip() -> AsyncIterator[bytes]:
            for _ in range(80):
                yield b"."
                await asyncio.sleep(0.05)

        return StreamingResponse(drip())

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with serve(app) as base_url:
        yield f"{base_url}/hook"


async def test_one_deadline_bounds_the_whole_post_not_each_read(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    timed = hook_settings.replace(webhook_timeout_s=0.5)
    async with trickling_receiver() as url:
        clock = manual_clock()
        job_id = await pending_delivery(pool, url, clock)
        webhooks = WebhookSender(pool, timed, clock=clock, rng=random.Random(9))
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with webhooks.client() as http, asyncio.timeout(3):
            assert await webhooks.deliver_due(http) == 1
        assert loop.time() - started < 2.5
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert "no answer within the 0.5 s deadline" in row["last_error"]


async def test_a_late_senders_failure_does_not_turn_a_delivered_row_back_to_pending(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    clock = manual_clock()
    gate = asyncio.Event()
    # The first POST (sender A's) is held, then answers 500; the second (B's) answers 204.
    async with webhook_receiver(fail_first=1, hold_first=gate) as receiver:
        job_id = await pending_delivery(pool, receiver.url, clock)
        a = WebhookSender(pool, hook_settings, clock=clock, rng=random.Random(1))
        b = WebhookSender(pool, hook_settings, clock=clock, rng=random.Random(2))
        async with a.client() as http:  # the client WebhookSender.run makes
            late = asyncio.create_task(a.deliver_due(http), name="late-sender")
            await eventually(lambda: requests_seen(receiver), lambda n: n == 1, what="A sent")
            clock.advance(3600)  # A's hold runs out while its POST is still under way
            assert await b.deliver_due(http) == 1
            assert (await the_delivery(pool, job_id))["status"] == "delivered"
            gate.set()
            async with asyncio.timeout(10):
                assert await late == 1
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 2, 204)
    assert row["last_error"] is None


async def test_a_late_senders_success_does_not_overwrite_a_newer_claims_outcome(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    clock = manual_clock()
    gate = asyncio.Event()
    async with webhook_receiver(hold_first=gate) as receiver:
        job_id = await pending_delivery(pool, receiver.url, clock)
        a = WebhookSender(pool, hook_settings, clock=clock, rng=random.Random(1))
        # B refuses the loopback receiver: it records a give-up without sending.
        strict = hook_settings.replace(webhook_allow_private=False)
        b = WebhookSender(pool, strict, clock=clock, rng=random.Random(2))
        async with a.client() as http:  # the client WebhookSender.run makes
            late = asyncio.create_task(a.deliver_due(http), name="late-sender")
            await eventually(lambda: requests_seen(receiver), lambda n: n == 1, what="A sent")
            clock.advance(3600)
            assert await b.deliver_due(http) == 1
            gate.set()
            async with asyncio.timeout(10):
                assert await late == 1
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("failed", 2, None)
    assert "loopback address 127.0.0.1" in row["last_error"]


async def requests_seen(receiver: Receiver) -> int:
    return len(receiver.requests)


async def test_a_forbidden_literal_webhook_address_is_a_422_at_create(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    for url in (
        "http://127.0.0.1:9/hook",
        "http://100.100.100.200/latest/meta-data/",  # a cloud metadata service
        "http://[2002:a9fe:a9fe::]/hook",  # 6to4 of 169.254.169.254
        "http://2130706433/hook",  # 127.0.0.1, as the resolver reads it
    ):
        response = await client.post("/api/jobs", json={"prompt": "hi", "webhook_url": url})
        assert response.status_code == 422, url
        assert response.headers["content-type"] == PROBLEM
        [error] = response.json()["errors"]
        assert error["field"] == "webhook_url"
        assert error["message"].startswith("must reach a public address"), error
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_batch_refuses_each_item_with_a_forbidden_webhook_address(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    items = [
        {"prompt": "a", "webhook_url": "http://169.254.169.254/latest/meta-data/"},
        {"prompt": "b", "webhook_url": "https://hooks.example.com/jobstream"},
        {"prompt": "c", "webhook_url": "http://[64:ff9b::7f00:1]/hook"},
    ]
    response = await client.post("/api/jobs/batch", json={"jobs": items})
    assert response.status_code == 200
    first, named, third = response.json()["results"]
    for refused in (first, third):
        assert refused["status"] == 422
        assert [e["field"] for e in refused["errors"]] == ["webhook_url"]
    assert named["status"] == "queued"  # a host name is judged when the worker resolves it
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_server_that_allows_private_targets_accepts_a_loopback_webhook(
    settings: Settings,
) -> None:
    async with (
        serve(create_app(settings.replace(webhook_allow_private=True))) as base_url,
        http_client(base_url=base_url, timeout=30) as http,
    ):
        response = await http.post(
            "/api/jobs", json={"prompt": "hi", "webhook_url": "http://127.0.0.1:9/hook"}
        )
    assert response.status_code == 202
