"""Each provider failure kind, through a worker running the OpenAI provider against the fake
server over real HTTP: the statuses, attempts, costs, charges and backoff docs/design.md gives
give.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from decimal import Decimal

import asyncpg
import pytest

from jobstream import claims
from jobstream.settings import Settings
from jobstream.worker.providers.openai import estimate_tokens
from jobstream.worker.retry import Backoff
from tests.support.fake_openai import FakeOpenAI, Reply, expected_text, prompt_tokens
from tests.support.openai_jobs import (
    billed_usd,
    create_openai_job,
    price,
    tenant_money,
)
from tests.support.workers import (
    attempt_rows,
    event_list,
    job_row,
    manual_clock,
    reassemble,
    running_worker,
    summary,
    wait_for_job,
    wait_for_status,
)


async def assert_ledger_reconciles(pool: asyncpg.Pool, fake: FakeOpenAI) -> None:
    """Recorded attempt costs equal the bill (when every cost is known), the tenant holds no
    reservation once the jobs ended, and it paid exactly what its jobs were charged."""
    costs = await pool.fetchrow(
        "SELECT coalesce(sum(cost_usd), 0) AS total, bool_and(cost_known) AS known"
        " FROM job_attempts"
    )
    assert costs is not None
    if costs["known"]:
        assert costs["total"] == billed_usd(fake.stats().records)
    charged = await pool.fetchval("SELECT coalesce(sum(charged_usd), 0) FROM jobs")
    assert await tenant_money(pool) == (Decimal(0), charged)


async def test_a_429_waits_out_retry_after_pauses_the_provider_and_costs_nothing(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    clock = manual_clock()
    prompt = f"limited {Reply(kind='error', status=429, retry_after='2', times=1).marker()}"
    limited = await create_openai_job(pool, ai_settings, prompt)
    async with running_worker(ai_settings, pool=pool, clock=clock) as worker:
        queued = await wait_for_job(
            pool, limited, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        # Backoff is 0 in the test settings: Retry-After alone sets the delay.
        assert queued["run_after"] == clock.now() + timedelta(seconds=2)
        pause = await pool.fetchrow("SELECT * FROM provider_state WHERE provider = 'openai'")
        assert pause is not None
        assert (pause["paused_at"], pause["paused_until"]) == (
            clock.now(),
            clock.now() + timedelta(seconds=2),
        )
        # The pause holds every openai job, for every worker.
        other = await create_openai_job(pool, ai_settings, "another job")
        worker.wake()
        probe = await claims.claim(
            pool, providers=["openai"], worker_id="probe", lease_s=30, clock=clock,
            limits=ai_settings.provider_limits,
        )  # fmt: skip
        assert probe is None
        assert (await job_row(pool, other))["status"] == "queued"
        assert fake.stats().requests == 1
        clock.advance(2)
        worker.wake()
        job = await wait_for_status(pool, limited, "succeeded")
        await wait_for_status(pool, other, "succeeded")
    first, second = await attempt_rows(pool, limited)
    assert (first["outcome"], first["error_class"]) == ("failed", "rate_limited")
    # Refused: nothing produced, nothing billed, and we know it.
    assert (first["cost_usd"], first["cost_known"]) == (0, True)
    assert (second["outcome"], second["cost_known"]) == ("succeeded", True)
    assert second["cost_usd"] == price(prompt_tokens(prompt), 8) == job["charged_usd"]
    assert job["result"]["text"] == expected_text(prompt, 8)
    await assert_ledger_reconciles(pool, fake)


async def test_a_429_without_retry_after_pauses_the_provider_for_the_jobs_backoff(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    clock = manual_clock()
    settings = ai_settings.replace(backoff_base_s=2.0, backoff_max_s=60.0)
    prompt = f"limited {Reply(kind='error', status=429, times=1).marker()}"
    job_id = await create_openai_job(pool, settings, prompt)
    async with running_worker(settings, pool=pool, clock=clock, rng=random.Random(3)):
        queued = await wait_for_job(
            pool, job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
    paused_until = await pool.fetchval("SELECT paused_until FROM provider_state")
    delay = Backoff(2.0, 60.0).delay(1, random.Random(3))
    assert paused_until == queued["run_after"]
    assert abs(paused_until - (clock.now() + timedelta(seconds=delay))) < timedelta(milliseconds=1)


async def test_a_500_is_retried_after_its_jittered_backoff_and_costs_nothing(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    clock = manual_clock()
    settings = ai_settings.replace(backoff_base_s=2.0, backoff_max_s=60.0)
    prompt = f"flaky {Reply(kind='error', status=500, times=1).marker()}"
    job_id = await create_openai_job(pool, settings, prompt)
    async with running_worker(settings, pool=pool, clock=clock, rng=random.Random(5)) as worker:
        queued = await wait_for_job(
            pool, job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        delay = Backoff(2.0, 60.0).delay(1, random.Random(5))  # the worker's first draw
        due = clock.now() + timedelta(seconds=delay)
        assert abs(queued["run_after"] - due) < timedelta(milliseconds=1)
        assert queued["error"]["class"] == "transient"
        assert "HTTP 500" in queued["error"]["message"]
        clock.advance(delay + 0.001)
        worker.wake()
        job = await wait_for_status(pool, job_id, "succeeded")
    first, second = await attempt_rows(pool, job_id)
    assert (first["outcome"], first["error_class"], first["cost_usd"], first["cost_known"]) == (
        "failed",
        "transient",
        0,
        True,
    )
    assert second["outcome"] == "succeeded" and job["charged_usd"] == second["cost_usd"]
    # A 500 is not a 429: nobody else is paused.
    assert await pool.fetchval("SELECT paused_until FROM provider_state") is None
    await assert_ledger_reconciles(pool, fake)


async def test_a_400_fails_the_job_at_once_and_releases_its_reservation(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    prompt = f"invalid {Reply(kind='error', status=400).marker()}"
    job_id = await create_openai_job(pool, ai_settings, prompt, max_attempts=3)
    assert (await tenant_money(pool)).reserved > 0
    async with running_worker(ai_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "failed")
    assert (job["attempts"], job["error"]["class"], job["charged_usd"]) == (1, "permanent", None)
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["outcome"], attempt["cost_usd"], attempt["cost_known"]) == ("failed", 0, True)
    assert fake.stats().requests == 1
    await assert_ledger_reconciles(pool, fake)


UNKNOWN_OUTCOMES = [
    pytest.param(Reply(kind="malformed", after_tokens=3), "malformed stream chunk", id="malformed"),
    pytest.param(Reply(kind="hang", after_tokens=3), "stream went idle", id="hang"),
    pytest.param(
        Reply(kind="disconnect", after_tokens=3), "after the request was sent", id="disconnect"
    ),
]


@pytest.mark.parametrize(("reply", "message"), UNKNOWN_OUTCOMES)
async def test_a_broken_stream_is_an_unknown_outcome_with_an_estimated_cost(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI, reply: Reply, message: str
) -> None:
    prompt = f"broken stream {reply.marker()}"
    job_id = await create_openai_job(pool, ai_settings, prompt)
    async with running_worker(ai_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "failed")
    # The provider may have done the work: not retried (the job did not allow it).
    assert job["error"]["class"] == "unknown" and message in job["error"]["message"]
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["outcome"], attempt["output_tokens"]) == ("unknown", 3)
    # Our estimate, flagged: the provider billed what it sent, which we cannot know for sure.
    assert attempt["cost_known"] is False
    assert attempt["cost_usd"] == price(estimate_tokens(prompt), 3)
    (request,) = fake.stats().records
    assert (request.billed_prompt_tokens, request.tokens_sent) == (prompt_tokens(prompt), 3)
    # Every token that arrived was persisted before the failure.
    log = await event_list(pool, job_id)
    assert reassemble(log) == expected_text(prompt, 3)
    assert summary(log)[-2:] == [(1, "attempt_error", None), (1, "done", "failed")]
    await assert_ledger_reconciles(pool, fake)


async def test_a_disconnect_is_retried_when_the_job_allows_unknown_outcomes(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    prompt = f"dropped once {Reply(kind='disconnect', after_tokens=3, times=1).marker()}"
    job_id = await create_openai_job(pool, ai_settings, prompt, retry_unknown=True)
    async with running_worker(ai_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "succeeded")
    first, second = await attempt_rows(pool, job_id)
    assert (first["outcome"], first["cost_known"]) == ("unknown", False)
    assert (second["outcome"], second["cost_known"]) == ("succeeded", True)
    # The tenant pays for the accepted result only; the lost attempt is the operator's cost.
    assert job["charged_usd"] == second["cost_usd"] == price(prompt_tokens(prompt), 8)
    assert reassemble(await event_list(pool, job_id)) == job["result"]["text"]
    await assert_ledger_reconciles(pool, fake)


async def test_a_job_whose_attempts_all_meet_500s_is_dead_and_charged_nothing(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    prompt = f"down {Reply(kind='error', status=503).marker()}"
    job_id: uuid.UUID = await create_openai_job(pool, ai_settings, prompt, max_attempts=2)
    async with running_worker(ai_settings, pool=pool):
        job = await wait_for_status(pool, job_id, "dead")
    assert (job["attempts"], job["error"]["class"], job["charged_usd"]) == (2, "transient", None)
    assert [(a["outcome"], a["cost_usd"]) for a in await attempt_rows(pool, job_id)] == [
        ("failed", 0),
        ("failed", 0),
    ]
    assert fake.stats().requests == 2
    await assert_ledger_reconciles(pool, fake)
