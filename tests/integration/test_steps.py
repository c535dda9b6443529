"""Durable steps and structured output (docs/jobs.md): a journaled step is not run again by a
later attempt, its text and progress are written again, a zombie cannot journal, and the
output error kinds follow their rules, each try costed.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from jobstream.settings import Settings
from tests.integration.test_worker_fencing import LEASE_S, expire_and_reap
from tests.support import user_jobs
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.openai_jobs import billed_usd, price, tenant_money
from tests.support.polling import eventually
from tests.support.sse_client import read_stream
from tests.support.sse_client import reassemble as reassemble_frames
from tests.support.user_jobs import app
from tests.support.workers import (
    attempt_rows,
    event_list,
    manual_clock,
    reassemble,
    running_worker,
    wait_for_status,
)

pytestmark = pytest.mark.timeout(60)

VALID = orjson.dumps({"title": "Leases", "score": 4, "tags": ["durable"]}).decode()


@pytest.fixture(autouse=True)
def fresh_seen() -> None:
    for found in user_jobs.seen.values():
        found.clear()


async def submit(api: httpx.AsyncClient, job: str, input: dict[str, Any]) -> uuid.UUID:
    response = await api.post("/api/jobs", json={"job": job, "input": input})
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


async def _value(value: Any) -> Any:
    return value


# The idle timeout of a call that hangs as if its worker were dead: the fixture's 0.4 s could
# end it as a provider error before the test's reaper takes the job on a loaded machine.
HUNG_S = 60.0


async def test_a_lost_attempt_replays_its_journaled_steps_and_runs_only_the_rest(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    # The third call of the first attempt hangs: its worker is as good as dead.
    fake.push(Reply(), Reply(), Reply(kind="hang", after_tokens=2))
    clock = manual_clock()
    settings = ai_settings.replace(lease_s=LEASE_S, openai_idle_timeout_s=HUNG_S)
    job_id = await submit(api, "three_steps", {"topic": "fencing tokens"})
    events_url = (await api.get(f"/api/jobs/{job_id}")).json()["events_url"]
    follower = read_stream(api, events_url)
    async with running_worker(
        settings.replace(worker_id="first"), pool=pool, clock=clock, app=app
    ) as first:
        await fake.wait_until(lambda s: s.requests == 3 and s.in_flight == 1)
        await expire_and_reap(pool, clock)
        async with running_worker(
            settings.replace(worker_id="second"), pool=pool, clock=clock, app=app
        ):
            job = await wait_for_status(pool, job_id, "succeeded")
        first.stop_now()
    frames = await follower
    records = fake.stats().records
    assert [r.prompt.split()[0] for r in records] == ["first", "second", "third", "third"]
    text = job["result"]["text"]
    assert reassemble_frames(frames.events) == text == reassemble(await event_list(pool, job_id))
    # The second attempt wrote the replayed steps' text and progress again, then the third.
    log = await event_list(pool, job_id)
    second = [e for e in log if e.attempt == 2]
    assert [e.data["message"] for e in second if e.type == "progress"] == [
        "first done", "second done"
    ]  # fmt: skip
    lost, won = await attempt_rows(pool, job_id)
    assert (lost["outcome"], won["outcome"]) == ("lost", "succeeded")
    # Each attempt records the calls it made: the lost one its two journaled steps (the call
    # that hung when it died is known to nobody), the accepted one its own call.
    call = [price(r.billed_prompt_tokens, r.tokens_sent) for r in records]
    assert lost["cost_usd"] == call[0] + call[1] and not lost["cost_known"]
    assert won["cost_usd"] == call[3]
    # The lost attempt's price source came with its journaled steps' cost.
    assert (lost["price_source"], won["price_source"]) == ("catalogue", "catalogue")
    # The result is made of the first two steps' answers and the last call: charged once.
    row = await pool.fetchrow("SELECT charged_usd FROM jobs WHERE id = $1", job_id)
    assert row is not None and row["charged_usd"] == call[0] + call[1] + call[3]
    assert await tenant_money(pool) == (Decimal(0), row["charged_usd"])


async def test_a_zombie_attempt_cannot_journal_a_step(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    # The zombie's first call hangs until the test lets it answer, after another attempt took
    # the job: then its step would be journaled, and is refused.
    fake.push(Reply(first_token_delay_s=1.5))
    clock = manual_clock()
    settings = ai_settings.replace(lease_s=LEASE_S)
    job_id = await submit(api, "three_steps", {"topic": "zombies"})
    async with running_worker(
        settings.replace(worker_id="zombie", worker_concurrency=1), pool=pool, clock=clock,
        app=app,
    ) as zombie:  # fmt: skip
        await fake.wait_until(lambda s: s.in_flight == 1)
        await expire_and_reap(pool, clock)
        # The zombie's answer comes after the reaper took the job: its journal is refused, and
        # the attempt stops. (The job, queued again, is then the worker's next attempt.)
        await eventually(
            lambda: _value(zombie.results), lambda r: r["fenced"] == 1, what="the zombie fenced"
        )
        await wait_for_status(pool, job_id, "succeeded")
    # A success does not wait for its journals, but a worker that stops does: they are all
    # there once it has stopped.
    steps = await pool.fetch("SELECT step, attempt FROM job_steps WHERE job_id = $1", job_id)
    assert sorted((r["step"], r["attempt"]) for r in steps) == [
        ("first", 2), ("second", 2), ("third", 2)
    ]  # fmt: skip
    assert [e.attempt for e in await event_list(pool, job_id) if e.type == "progress"] == [2, 2]


async def test_an_invalid_answer_is_asked_again_with_its_errors(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(content='{"title": "Leases", "score": 9}'), Reply(content=VALID))
    job_id = await submit(api, "rate", {"topic": "leases"})
    async with running_worker(ai_settings, pool=pool, app=app):
        job = await wait_for_status(pool, job_id, "succeeded")
    assert job["result"]["output"] == orjson.loads(VALID)
    asked, again = fake.stats().records
    assert asked.schema_name == again.schema_name == "Rated"
    # The re-ask carries the last answer and what was wrong with it.
    roles = [role for role, _ in again.messages]
    assert roles == ["user", "assistant", "user"]
    assert again.messages[1][1].endswith('{"title": "Leases", "score": 9}')
    assert "score" in again.messages[2][1] and "tags" in again.messages[2][1]
    first, second = await attempt_rows(pool, job_id)
    assert (first["error_class"], second["outcome"]) == ("invalid_output", "succeeded")
    assert first["cost_usd"] + second["cost_usd"] == billed_usd(fake.stats().records)
    failure = user_jobs.seen["previous_failures"][1]
    assert failure["class"] == "invalid_output" and "score" in failure["message"]
    # The plain-function step ran once: the retry replayed it.
    assert user_jobs.seen["notes_runs"] == ["leases"]
    charged = await pool.fetchval("SELECT charged_usd FROM jobs WHERE id = $1", job_id)
    assert charged == second["cost_usd"]  # the invalid try is ours
    assert await tenant_money(pool) == (Decimal(0), charged)


async def test_always_invalid_fails_after_its_budget_each_try_costed(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(content="not json", times=3))
    job_id = await submit(api, "rate", {"topic": "never"})
    async with running_worker(ai_settings, pool=pool, app=app):
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"]["class"] == "invalid_output"
    rows = await attempt_rows(pool, job_id)
    assert [r["error_class"] for r in rows] == ["invalid_output"] * 3  # 1 + the 2 retries
    assert all(r["cost_known"] and r["cost_usd"] > 0 for r in rows)
    assert sum(r["cost_usd"] for r in rows) == billed_usd(fake.stats().records)
    assert job["attempts"] - job["uncounted_attempts"] == 1  # beside max_attempts
    assert await tenant_money(pool) == (Decimal(0), Decimal(0))


async def test_a_truncated_answer_is_retried_once_with_its_limit_doubled(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(content=VALID[:20], finish_reason="length"), Reply(content=VALID))
    job_id = await submit(api, "rate", {"topic": "long"})
    async with running_worker(ai_settings, pool=pool, app=app):
        await wait_for_status(pool, job_id, "succeeded")
    assert [r.max_tokens for r in fake.stats().records] == [64, 128]
    fake.push(Reply(content=VALID[:20], finish_reason="length", times=2))
    again = await submit(api, "rate", {"topic": "longer"})
    async with running_worker(ai_settings, pool=pool, app=app):
        job = await wait_for_status(pool, again, "failed")
    assert job["error"]["class"] == "output_truncated"
    assert [r["error_class"] for r in await attempt_rows(pool, again)] == ["output_truncated"] * 2


async def test_a_refusal_is_final(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(refusal="I can't help with that."))
    job_id = await submit(api, "rate", {"topic": "forbidden"})
    async with running_worker(ai_settings, pool=pool, app=app):
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"] == {"class": "refused", "message": "I can't help with that."}
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["cost_usd"] == billed_usd(fake.stats().records) > 0


async def test_steps_at_once_keep_their_text_apart_and_a_retry_runs_only_the_unfinished(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(), Reply(), Reply(kind="hang", after_tokens=3))
    clock = manual_clock()
    settings = ai_settings.replace(lease_s=LEASE_S, openai_idle_timeout_s=HUNG_S)
    job_id = await submit(api, "fan_out", {"topic": "winds", "max_tokens": 8})
    async with running_worker(
        settings.replace(worker_id="first"), pool=pool, clock=clock, app=app
    ) as first:
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM job_steps WHERE job_id = $1", job_id),
            lambda n: n == 2,
            what="two steps journaled",
        )
        await fake.wait_until(lambda s: s.in_flight == 1)
        hung = next(r for r in fake.stats().records if r.outcome == "running").prompt.split()[0]
        await expire_and_reap(pool, clock)
        async with running_worker(
            settings.replace(worker_id="second"), pool=pool, clock=clock, app=app
        ):
            job = await wait_for_status(pool, job_id, "succeeded")
        first.stop_now()
    prompts = [r.prompt.split()[0] for r in fake.stats().records]
    assert sorted(prompts) == sorted(["north", "east", "south", hung])
    answers = job["result"]["output"]["answers"]
    # Each step's text stands in one piece in the accepted attempt's text.
    text = job["result"]["text"]
    assert text == reassemble(await event_list(pool, job_id))
    for answer in answers.values():
        assert answer in text
    assert len(text) == sum(len(a) for a in answers.values())


async def test_a_failing_step_is_not_journaled_and_names_repeat_with_an_index(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    from pydantic import BaseModel

    import jobstream

    own = jobstream.App()
    calls: list[int] = []

    class Nothing(BaseModel):
        pass

    @own.job("loop", input=Nothing, max_attempts=2)
    async def loop(_: Nothing, ctx: jobstream.Context) -> None:
        async def once(i: int) -> int:
            calls.append(i)
            if i == 2 and ctx.attempt == 1:
                raise RuntimeError("the third fails on the first attempt")
            await ctx.emit(f"{i};")
            return i * i

        for i in range(3):
            assert await ctx.step("square", once, i) == i * i

    settings = settings.replace(backoff_base_s=0.0, backoff_max_s=0.0)
    from tests.support.workers import create_job

    job_id = await create_job(pool, prompt="", job="loop", input={})
    async with running_worker(settings, pool=pool, app=own):
        job = await wait_for_status(pool, job_id, "succeeded")
    assert calls == [0, 1, 2, 2]  # the retry ran only the step that failed
    steps = await eventually(
        lambda: pool.fetch("SELECT step FROM job_steps WHERE job_id = $1 ORDER BY step", job_id),
        lambda rows: len(rows) == 3,
        what="three steps journaled",
    )
    assert [r["step"] for r in steps] == ["square", "square#1", "square#2"]
    # Every attempt's text is whole: the replayed steps' text, then the re-run one's.
    assert job["result"]["text"] == "0;1;2;"
