"""Webhooks end to end: the outbox row commits with the job's end, and a worker delivers it,
signed, to a real receiver on loopback, retrying a failing one and refusing private targets.
Lookups, deadlines, racing senders and refused addresses: test_webhook_rounds.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from typing import Any

import asyncpg
import orjson

from jobstream import jobs
from jobstream.settings import Settings
from tests.support.clock import ManualClock
from tests.support.polling import eventually
from tests.support.webhook_outbox import SECRET, deliveries
from tests.support.webhook_receiver import webhook_receiver
from tests.support.workers import (
    create_job,
    fast,
    manual_clock,
    running_worker,
    wait_for_status,
)


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
    snap, changed = await jobs.cancel(pool, "default", cancelled, manual_clock())
    assert changed and snap.job.status == "cancelled"
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
