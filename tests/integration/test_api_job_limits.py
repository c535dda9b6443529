"""The jobs API over real HTTP, where a create may be refused or deferred: retrying a dead job,
the tenant's budget and create rate, and delayed jobs."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx

from tests.support.api import PROBLEM, job_body, job_count


async def test_retry_makes_a_new_job_for_a_dead_one_only(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = (await client.post("/api/jobs", json=job_body(max_attempts=1))).json()
    refused = await client.post(f"/api/jobs/{job['id']}/retry")
    assert refused.status_code == 409
    assert refused.headers["content-type"] == PROBLEM
    assert refused.json()["type"] == "/problems/not-dead"
    job_id = uuid.UUID(job["id"])
    # A job whose only attempt was lost and whose attempts are used up.
    await pool.execute(
        "UPDATE jobs SET status = 'dead', attempts = 1, finished_at = now() WHERE id = $1", job_id
    )
    retried = await client.post(f"/api/jobs/{job['id']}/retry")
    assert retried.status_code == 202
    retry = retried.json()
    assert retry["id"] != job["id"] and retry["status"] == "queued"
    assert retry["retry_of"] == job["id"]
    row = await pool.fetchrow(
        "SELECT attempts, uncounted_attempts FROM jobs WHERE id = $1", uuid.UUID(retry["id"])
    )
    assert row is not None and (row["attempts"], row["uncounted_attempts"]) == (0, 0)
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id) == "dead"


async def test_a_retry_passes_the_budget_and_the_rate_as_a_create_does(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # Regression: the tenant's own key could retry a dead job past its budget (five 202s on a
    # $0.0001 budget, each holding the estimate again) and past its create rate.
    job = (await client.post("/api/jobs", json=job_body(max_tokens=100))).json()
    job_id = uuid.UUID(job["id"])
    # Dead, its reservation released, as a job whose attempts ran out.
    await pool.execute(
        "UPDATE jobs SET status = 'dead', attempts = 3, reserved_usd = 0 WHERE id = $1", job_id
    )
    await pool.execute("UPDATE tenant_ledger SET reserved_usd = 0")
    await pool.execute("UPDATE tenants SET budget_usd = 0.0001")  # less than the 0.0002 estimate
    refused = await client.post(f"/api/jobs/{job['id']}/retry")
    assert refused.status_code == 402
    assert refused.json()["type"] == "/problems/budget-exhausted"
    await pool.execute("UPDATE tenants SET budget_usd = NULL, create_rate_per_min = 1")
    limited = await client.post(f"/api/jobs/{job['id']}/retry")
    assert limited.status_code == 429 and "retry-after" in limited.headers
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id) == "dead"
    assert await pool.fetchval("SELECT reserved_usd FROM tenant_balances") == 0
    await pool.execute("UPDATE tenants SET create_rate_per_min = NULL, budget_usd = 1")
    assert (await client.post(f"/api/jobs/{job['id']}/retry")).status_code == 202
    # The retry, a new job, holds the estimate; a repeated request holds nothing more.
    assert str(await pool.fetchval("SELECT reserved_usd FROM tenant_balances")) == "0.00020000"
    assert (await client.post(f"/api/jobs/{job['id']}/retry")).status_code == 200
    assert str(await pool.fetchval("SELECT reserved_usd FROM tenant_balances")) == "0.00020000"


async def test_create_beyond_the_budget_is_402_and_makes_nothing(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # 100 tokens at the simulator's default price reserve 0.0002 USD.
    await pool.execute("UPDATE tenants SET budget_usd = 0.0003 WHERE id = 'default'")
    first = await client.post("/api/jobs", json=job_body(max_tokens=100))
    second = await client.post("/api/jobs", json=job_body(prompt="again", max_tokens=100))
    assert first.status_code == 202
    assert second.status_code == 402
    assert second.headers["content-type"] == PROBLEM
    assert second.json()["type"] == "/problems/budget-exhausted"
    assert await job_count(pool) == 1
    reserved = await pool.fetchval(
        "SELECT reserved_usd FROM tenant_balances WHERE tenant_id = 'default'"
    )
    assert str(reserved) == "0.00020000"


async def test_creates_beyond_the_tenants_rate_are_429_with_retry_after(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await pool.execute("UPDATE tenants SET create_rate_per_min = 3 WHERE id = 'default'")
    responses = await asyncio.gather(
        *(client.post("/api/jobs", json=job_body(prompt=f"p{i}")) for i in range(6))
    )
    assert sorted(r.status_code for r in responses) == [202] * 3 + [429] * 3
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["content-type"] == PROBLEM
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert await job_count(pool) == 3
    # A replay of a job already made is no new create: the limit does not refuse it.
    made = next(r for r in responses if r.status_code == 202).json()
    headers = {"Idempotency-Key": "replayed"}
    await pool.execute("UPDATE tenants SET create_rate_per_min = NULL WHERE id = 'default'")
    first = await client.post("/api/jobs", json=job_body(prompt="kept"), headers=headers)
    await pool.execute("UPDATE tenants SET create_rate_per_min = 1 WHERE id = 'default'")
    again = await client.post("/api/jobs", json=job_body(prompt="kept"), headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert made["id"] != first.json()["id"]


async def test_a_delayed_job_shows_when_it_may_run(client: httpx.AsyncClient) -> None:
    at = "2099-01-01T09:30:00+00:00"
    for fields in ({"delay_s": 90}, {"run_at": "2026-12-01T09:30:00Z"}):
        response = await client.post("/api/jobs", json=job_body(**fields))
        assert response.status_code == 202, response.text
        job = (await client.get(response.json()["poll_url"])).json()
        assert job["status"] == "queued" and job["run_at"] is not None
    # Over a year ahead, naive, malformed, or both forms at once: 422 naming the field.
    refusals: list[tuple[dict[str, object], str]] = [
        ({"run_at": at}, "run_at"),
        ({"run_at": "2026-12-01T09:30:00"}, "run_at"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"run_at": "2026-12-01T09:30:00Z", "delay_s": 5}, "delay_s"),
        ({"delay_s": -1}, "delay_s"),
    ]
    for bad, field in refusals:
        refused = await client.post("/api/jobs", json=job_body(**bad))
        assert refused.status_code == 422, bad
        assert [e["field"] for e in refused.json()["errors"]] == [field]


async def test_delay_s_puts_run_at_that_far_after_the_create(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = (await client.post("/api/jobs", json=job_body(delay_s=90))).json()
    row = await pool.fetchrow(
        "SELECT created_at, run_after FROM jobs WHERE id = $1::uuid", job["id"]
    )
    assert row is not None
    assert (row["run_after"] - row["created_at"]).total_seconds() == 90
