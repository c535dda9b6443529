"""Webhooks end to end: the outbox row commits with the job's end, and a worker delivers it,
signed, to a real receiver on loopback, retrying a failing one and refusing private targets.

Tests that need one round at a time drive a WebhookSender directly, with a manual clock."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from jobstream import jobs
from jobstream.clock import ManualClock
from jobstream.settings import Settings
from server.app import create_app
from tests.support.http_server import serve
from tests.support.polling import eventually
from tests.support.resolver import Resolver, fake_resolver
from tests.support.webhook_receiver import Receiver, webhook_receiver
from tests.support.workers import (
    create_job,
    fast,
    manual_clock,
    running_worker,
    wait_for_status,
)
from worker.webhooks import WebhookSender

SECRET = "whsec_" + base64.b64encode(b"a test key of thirty-two bytes!!").decode()


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    return settings.replace(
        webhook_allow_private=True,
        webhook_secret=SECRET,
        webhook_backoff_base_s=0.0,
        webhook_backoff_max_s=0.0,
        webhook_poll_interval_s=0.05,
        webhook_max_attempts=5,
    )


async def deliveries(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM webhook_deliveries WHERE job_id = $1", job_id)
    return [dict(r) for r in rows]


async def settled(pool: asyncpg.Pool, job_id: uuid.UUID) -> dict[str, Any]:
    """The job's one delivery, once it is no longer pending."""
    rows = await eventually(
        lambda: deliveries(pool, job_id),
        lambda rows: len(rows) == 1 and rows[0]["status"] != "pending",
        what="the delivery settled",
    )
    return rows[0]


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does (README, "Webhooks"), written independently of worker/signatures."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(f"v1,{expected}", sig) for sig in headers["webhook-signature"].split()
    )


async def test_a_succeeded_job_delivers_one_signed_webhook(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    async with webhook_receiver() as receiver:
        job_id = await create_job(pool, webhook_url=receiver.url, simulate=fast(3))
        async with running_worker(hook_settings, pool=pool):
            await wait_for_status(pool, job_id, "succeeded")
            row = await settled(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 1, 204)
    assert len(receiver.requests) == 1
    received = receiver.requests[0]
    assert received.headers["webhook-id"] == str(row["id"])
    assert verify(SECRET, received.headers, received.body)
    payload = orjson.loads(received.body)
    assert payload["type"] == "job.succeeded"
    assert payload["data"]["id"] == str(job_id)
    assert payload["data"]["status"] == "succeeded"
    assert payload["data"]["attempts"] == 1
    assert payload["data"]["result"]["text"] == "0 1 2 "
    assert "error" not in payload["data"]


async def test_a_failing_receiver_is_retried_then_delivered(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    clock: ManualClock = manual_clock()  # with backoff 0, every retry is due at once
    async with webhook_receiver(fail_first=2) as receiver:
        job_id = await create_job(pool, webhook_url=receiver.url, simulate=fast(1))
        async with running_worker(hook_settings, pool=pool, clock=clock):
            await wait_for_status(pool, job_id, "succeeded")
            row = await settled(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 3, 204)
    assert row["last_error"] is None
    assert len(receiver.requests) == 3
    # One message, tried three times: the id (what receivers dedupe on) and body do not change.
    assert {r.headers["webhook-id"] for r in receiver.requests} == {str(row["id"])}
    assert len({r.body for r in receiver.requests}) == 1
    assert all(verify(SECRET, r.headers, r.body) for r in receiver.requests)


async def test_a_receiver_that_keeps_failing_ends_failed_after_max_attempts(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    async with webhook_receiver(fail_first=100) as receiver:
        job_id = await create_job(pool, webhook_url=receiver.url, simulate=fast(1))
        async with running_worker(hook_settings.replace(webhook_max_attempts=3), pool=pool):
            row = await settled(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("failed", 3, 500)
    assert row["last_error"].startswith("HTTP 500")
    assert len(receiver.requests) == 3


async def test_a_loopback_target_is_refused_when_private_targets_are_not_allowed(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    strict = hook_settings.replace(webhook_allow_private=False)
    async with webhook_receiver() as receiver:
        job_id = await create_job(pool, webhook_url=receiver.url, simulate=fast(1))
        async with running_worker(strict, pool=pool):
            row = await settled(pool, job_id)
    assert row["status"] == "failed"
    assert row["attempts"] == 1
    assert row["last_status_code"] is None
    assert "loopback address 127.0.0.1" in row["last_error"]
    assert receiver.requests == []


async def test_the_outbox_row_commits_with_the_jobs_end(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    url = "https://hooks.example.com/jobstream"
    cancelled = await create_job(pool, webhook_url=url)
    silent = await create_job(pool, webhook_url=None)
    assert await deliveries(pool, cancelled) == []  # a queued job has not ended
    job, changed = await jobs.cancel(pool, "default", cancelled, manual_clock())
    assert changed and job["status"] == "cancelled"
    # Read right after the cancel returned, with no polling: it committed with the job's end.
    [row] = await deliveries(pool, cancelled)
    assert (row["event"], row["url"], row["status"]) == ("job.cancelled", url, "pending")
    assert row["payload"]["data"] == {
        "id": str(cancelled),
        "status": "cancelled",
        "attempts": 0,
        "error": {"class": "cancelled", "message": "cancelled before it started"},
    }
    await jobs.cancel(pool, "default", silent, manual_clock())
    assert await deliveries(pool, silent) == []  # no webhook_url, no delivery


async def test_a_job_ended_by_a_worker_has_exactly_one_delivery_row(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    # The sender refuses this loopback URL (allow_private is off); what matters here is that the
    # row exists as soon as the job reads succeeded, and that there is only one.
    job_id = await create_job(pool, webhook_url="http://127.0.0.1:9/hook", simulate=fast(2))
    async with running_worker(settings, pool=pool):
        await wait_for_status(pool, job_id, "succeeded")
        rows = await deliveries(pool, job_id)
    assert len(rows) == 1
    assert rows[0]["event"] == "job.succeeded"


async def test_a_failed_job_delivers_its_error(pool: asyncpg.Pool, hook_settings: Settings) -> None:
    async with webhook_receiver() as receiver:
        job_id = await create_job(
            pool,
            webhook_url=receiver.url,
            simulate=fast(2, faults=[{"kind": "permanent", "attempt": 1}]),
        )
        async with running_worker(hook_settings, pool=pool):
            await wait_for_status(pool, job_id, "failed")
            row = await settled(pool, job_id)
    assert (row["event"], row["status"]) == ("job.failed", "delivered")
    payload = orjson.loads(receiver.requests[0].body)
    assert payload["type"] == "job.failed"
    assert payload["data"]["error"]["class"] == "permanent"
    assert "result" not in payload["data"]


async def test_a_tenant_without_a_secret_gets_one_stored_and_signed_with(
    pool: asyncpg.Pool, hook_settings: Settings
) -> None:
    async with webhook_receiver() as receiver:
        job_id = await create_job(pool, webhook_url=receiver.url, simulate=fast(1))
        async with running_worker(hook_settings.replace(webhook_secret=""), pool=pool):
            await settled(pool, job_id)
    secret = await pool.fetchval("SELECT webhook_secret FROM tenants WHERE id = 'default'")
    assert secret.startswith("whsec_")
    received = receiver.requests[0]
    assert verify(secret, received.headers, received.body)


# --- one round at a time (issue 9, "Hardening": webhooks) ---

PROBLEM = "application/problem+json"


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    with fake_resolver(monkeypatch) as fake:
        yield fake


@asynccontextmanager
async def http_for(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The client WebhookSender.run makes: the settings' timeout, no redirects."""
    async with httpx.AsyncClient(
        timeout=settings.webhook_timeout_s, follow_redirects=False
    ) as http:
        yield http


async def pending_delivery(pool: asyncpg.Pool, url: str, clock: ManualClock) -> uuid.UUID:
    """A job whose delivery row is due at `clock`'s now: it was cancelled before it ran."""
    job_id = await create_job(pool, webhook_url=url)
    await jobs.cancel(pool, "default", job_id, clock)
    return job_id


async def the_delivery(pool: asyncpg.Pool, job_id: uuid.UUID) -> dict[str, Any]:
    [row] = await deliveries(pool, job_id)
    return row


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
    async with http_for(strict) as http:
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
    async with http_for(strict) as http, asyncio.timeout(5):
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
        async with http_for(timed) as http, asyncio.timeout(3):
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
        async with http_for(hook_settings) as http:
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
        async with http_for(hook_settings) as http:
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
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        response = await http.post(
            "/api/jobs", json={"prompt": "hi", "webhook_url": "http://127.0.0.1:9/hook"}
        )
    assert response.status_code == 202
