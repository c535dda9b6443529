"""The anthropic provider through a live server and worker against the fake Messages API over
real HTTP: the text, usage and cost a job ends with, and each failure's rule (docs/design.md,
"Errors and retries")."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import claims
from jobstream.server.app import create_app
from jobstream.settings import Settings
from jobstream.worker.providers.anthropic import estimate_tokens
from jobstream.worker.retry import Backoff
from tests.support import user_jobs
from tests.support.anthropic_jobs import MAX_TOKENS, price
from tests.support.fake_anthropic import FakeAnthropic, Reply
from tests.support.fake_openai import expected_text, prompt_tokens
from tests.support.http_server import http_client, serve
from tests.support.openai_jobs import tenant_money
from tests.support.workers import (
    attempt_rows,
    event_list,
    manual_clock,
    reassemble,
    running_worker,
    summary,
    wait_for_job,
    wait_for_status,
)


@pytest.fixture
async def claude_api(claude_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a live server with the Anthropic key, and the test app's jobs."""
    async with (
        serve(create_app(claude_settings, jobs=user_jobs.app)) as url,
        http_client(url, timeout=30) as client,
    ):
        yield client


async def create(api: httpx.AsyncClient, prompt: str, **fields: Any) -> uuid.UUID:
    body = {"prompt": prompt, "provider": "anthropic", "max_tokens": MAX_TOKENS, **fields}
    response = await api.post("/api/jobs", json=body)
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


async def assert_money_settles(pool: asyncpg.Pool) -> None:
    """No reservation left once the jobs ended; the tenant paid what its jobs were charged."""
    charged = await pool.fetchval("SELECT coalesce(sum(charged_usd), 0) FROM jobs")
    assert await tenant_money(pool) == (Decimal(0), charged)


async def test_a_job_streams_the_fakes_text_with_usage_and_cache_tokens_priced(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    prompt = "explain leases and fencing tokens in durable job queues"
    claude.push(Reply(cache_read=200, cache_write=60))
    job_id = await create(claude_api, prompt, instructions="answer briefly")
    async with running_worker(claude_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "succeeded")
    text = expected_text(prompt, MAX_TOKENS)
    assert job["result"]["text"] == text == reassemble(await event_list(pool, job_id))
    uncached = prompt_tokens(f"answer briefly\n{prompt}")
    cost = price(uncached, MAX_TOKENS, cache_write=60, cache_read=200)
    assert job["result"]["usage"] == {
        "input_tokens": uncached + 260, "output_tokens": MAX_TOKENS, "cost": str(cost),
        "cost_known": True, "cache_read_tokens": 200, "cache_write_tokens": 60,
    }  # fmt: skip
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (uncached + 260, MAX_TOKENS)
    assert attempt["cost_usd"] == cost == job["charged_usd"]
    assert attempt["price_source"] == "catalogue"
    # The poll shows it too, through the API.
    polled = (await claude_api.get(f"/api/jobs/{job_id}")).json()
    assert polled["result"]["usage"]["cache_read_tokens"] == 200
    await assert_money_settles(pool)


OVERLOADS = [
    pytest.param(Reply(kind="error", status=529, error_type="overloaded_error"), True, id="529"),
    pytest.param(
        Reply(kind="stream_error", error_type="overloaded_error", after_tokens=0),
        False,
        id="overloaded_error-after-200",
    ),
]


@pytest.mark.parametrize(("overload", "refused"), OVERLOADS)
async def test_an_overload_is_retried_after_backoff_pausing_the_provider_and_each_try_is_costed(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
    overload: Reply,
    refused: bool,
) -> None:
    clock = manual_clock()
    settings = claude_settings.replace(backoff_base_s=2.0, backoff_max_s=60.0)
    prompt = "summarise the overload"
    claude.push(overload)
    job_id = await create(claude_api, prompt)
    async with running_worker(settings, pool=pool, clock=clock, rng=random.Random(5)) as worker:
        queued = await wait_for_job(
            pool, job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        delay = Backoff(2.0, 60.0).delay(1, random.Random(5))
        assert abs(queued["run_after"] - (clock.now() + timedelta(seconds=delay))) < timedelta(
            milliseconds=1
        )
        assert queued["error"]["class"] == "transient"
        assert "overloaded_error" in queued["error"]["message"]
        # Every worker backs off the provider, as after a 429, for the job's backoff.
        paused = await pool.fetchval(
            "SELECT paused_until FROM provider_state WHERE provider = 'anthropic'"
        )
        assert paused == queued["run_after"]
        clock.advance(delay + 0.001)
        worker.wake()
        job = await wait_for_status(pool, job_id, "succeeded")
    first, second = await attempt_rows(pool, job_id)
    assert (first["outcome"], first["error_class"]) == ("failed", "transient")
    if refused:
        # An error status: nothing produced, nothing billed, and we know it.
        assert (first["cost_usd"], first["cost_known"]) == (0, True)
    else:
        # After the 200 the work had begun: our estimate of the prompt, flagged.
        assert first["cost_known"] is False
        assert first["cost_usd"] == price(estimate_tokens(prompt), 0) > 0
    assert second["cost_usd"] == price(prompt_tokens(prompt), MAX_TOKENS) == job["charged_usd"]
    assert job["result"]["text"] == expected_text(prompt, MAX_TOKENS)
    assert claude.stats().requests == 2  # the SDK retried nothing itself
    await assert_money_settles(pool)


async def test_a_429_waits_out_retry_after_and_pauses_the_provider(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    clock = manual_clock()
    claude.push(Reply(kind="error", status=429, error_type="rate_limit_error", retry_after="3"))
    job_id = await create(claude_api, "limited")
    async with running_worker(claude_settings, pool=pool, clock=clock) as worker:
        queued = await wait_for_job(
            pool, job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        assert queued["run_after"] == clock.now() + timedelta(seconds=3)
        paused = await pool.fetchval(
            "SELECT paused_until FROM provider_state WHERE provider = 'anthropic'"
        )
        assert paused == clock.now() + timedelta(seconds=3)
        # The pause holds every anthropic job, for every worker.
        other = await create(claude_api, "another")
        probe = await claims.claim(
            pool, providers=["anthropic"], worker_id="probe", lease_s=30, clock=clock,
            limits=claude_settings.provider_limits,
        )  # fmt: skip
        assert probe is None and claude.stats().requests == 1
        clock.advance(3)
        worker.wake()
        await wait_for_status(pool, job_id, "succeeded")
        await wait_for_status(pool, other, "succeeded")
    first, _ = await attempt_rows(pool, job_id)
    assert (first["error_class"], first["cost_usd"], first["cost_known"]) == (
        "rate_limited",
        0,
        True,
    )


async def test_an_invalid_request_fails_at_once_as_permanent(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    claude.push(Reply(kind="error", status=400, error_type="invalid_request_error"))
    job_id = await create(claude_api, "invalid", max_attempts=3)
    async with running_worker(claude_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "failed")
    assert (job["attempts"], job["error"]["class"], job["charged_usd"]) == (1, "permanent", None)
    assert "invalid_request_error" in job["error"]["message"]
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["cost_usd"], attempt["cost_known"]) == (0, True)
    assert claude.stats().requests == 1
    await assert_money_settles(pool)


@pytest.mark.parametrize("retry_unknown", [False, True])
async def test_a_connection_dropped_mid_stream_is_an_unknown_outcome(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
    retry_unknown: bool,
) -> None:
    prompt = "a stream that breaks"
    claude.push(Reply(kind="disconnect", after_tokens=3))
    job_id = await create(claude_api, prompt, retry_unknown=retry_unknown)
    async with running_worker(claude_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "succeeded" if retry_unknown else "failed")
    attempts = await attempt_rows(pool, job_id)
    assert (attempts[0]["outcome"], attempts[0]["output_tokens"]) == ("unknown", 3)
    assert attempts[0]["cost_known"] is False
    assert attempts[0]["cost_usd"] == price(estimate_tokens(prompt), 3)
    if retry_unknown:
        assert [a["outcome"] for a in attempts] == ["unknown", "succeeded"]
        assert job["charged_usd"] == attempts[1]["cost_usd"]
        assert reassemble(await event_list(pool, job_id)) == job["result"]["text"]
    else:
        assert len(attempts) == 1 and job["error"]["class"] == "unknown"
        log = await event_list(pool, job_id)
        assert reassemble(log) == expected_text(prompt, 3)
        assert summary(log)[-2:] == [(1, "attempt_error", None), (1, "done", "failed")]
    await assert_money_settles(pool)


async def test_a_structured_answer_cut_at_max_tokens_is_output_truncated_by_its_rule(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    # ctx.llm.parse through Anthropic's structured outputs (output_config.format): cut at
    # max_tokens, retried once at once with the limit doubled, then failed.
    claude.push(Reply(content='{"title": "Le', stop_reason="max_tokens", times=2))
    response = await claude_api.post(
        "/api/jobs", json={"job": "rate", "input": {"topic": "long", "provider": "anthropic"}}
    )
    assert response.status_code == 202, response.text
    job_id = uuid.UUID(response.json()["id"])
    async with running_worker(claude_settings, pool=pool, app=user_jobs.app):
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"]["class"] == "output_truncated"
    assert [r["error_class"] for r in await attempt_rows(pool, job_id)] == ["output_truncated"] * 2
    records = claude.stats().records
    assert [r.max_tokens for r in records] == [64, 128]
    assert all(r.output_format and r.output_format["type"] == "json_schema" for r in records)


async def test_a_structured_answer_parses(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    claude.push(Reply(content='{"title": "Leases", "score": 4, "tags": ["queues"]}'))
    response = await claude_api.post(
        "/api/jobs", json={"job": "rate", "input": {"topic": "leases", "provider": "anthropic"}}
    )
    job_id = uuid.UUID(response.json()["id"])
    async with running_worker(claude_settings, pool=pool, app=user_jobs.app):
        job = await wait_for_status(pool, job_id, "succeeded")
    assert job["result"]["output"] == {"title": "Leases", "score": 4, "tags": ["queues"]}


async def test_a_create_naming_anthropic_without_its_key_is_a_422_naming_the_setting(
    settings: Settings,
) -> None:
    assert settings.anthropic_api_key == ""
    async with (
        serve(create_app(settings)) as url,
        http_client(url, timeout=30) as client,
    ):
        for body in (
            {"prompt": "hi", "provider": "anthropic"},  # the lean path's body
            {"prompt": "hi", "provider": "anthropic", "metadata": {"a": 1}, "priority": 1},
        ):
            response = await client.post("/api/jobs", json=body)
            assert response.status_code == 422, response.text
            assert "JOBSTREAM_ANTHROPIC_API_KEY" in response.text
        batch = await client.post(
            "/api/jobs/batch", json={"jobs": [{"prompt": "hi", "provider": "anthropic"}]}
        )
        assert "JOBSTREAM_ANTHROPIC_API_KEY" in batch.text


async def test_the_provider_wide_concurrency_limit_holds_for_anthropic(
    pool: asyncpg.Pool,
    claude_settings: Settings,
    claude_api: httpx.AsyncClient,
    claude: FakeAnthropic,
) -> None:
    # Two workers with room for many, the provider limited to two attempts at once.
    settings = claude_settings.replace(provider_concurrency="anthropic=2")
    claude.push(Reply(token_delay_s=0.05, times=6))  # 0.35 s a job: they overlap
    jobs = [await create(claude_api, f"job {i} of six") for i in range(6)]
    async with (
        running_worker(settings.replace(worker_id="one"), pool=pool),
        running_worker(settings.replace(worker_id="two"), pool=pool),
    ):
        for job_id in jobs:
            await wait_for_status(pool, job_id, "succeeded")
    stats = claude.stats()
    assert (stats.requests, stats.max_in_flight) == (6, 2)
