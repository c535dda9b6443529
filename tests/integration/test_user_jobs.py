"""Your own code as jobs (`@app.job`, docs/jobs.md) through a live server and worker: created over
HTTP, run by a worker that loads the test app, followed over SSE and long-poll, with every write
fenced, every call's cost recorded and the tenant charged once.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream.settings import Settings
from tests.integration.test_worker_fencing import LEASE_S, expire_and_reap
from tests.support import user_jobs
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.openai_jobs import billed_usd, tenant_money
from tests.support.polling import eventually, signalled
from tests.support.sse_client import read_stream
from tests.support.sse_client import reassemble as reassemble_frames
from tests.support.user_jobs import app, probe
from tests.support.workers import (
    attempt_rows,
    event_list,
    job_row,
    manual_clock,
    reassemble,
    running_worker,
    wait_for_status,
)

pytestmark = pytest.mark.timeout(60)


async def submit(api: httpx.AsyncClient, job: str, input: dict[str, Any], **envelope: Any) -> str:
    response = await api.post("/api/jobs", json={"job": job, "input": input, **envelope})
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


async def long_poll(api: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    """Every event of the job, read as a polling client does: after its cursor, waiting."""
    seen: list[dict[str, Any]] = []
    after = 0
    while not seen or seen[-1]["type"] != "done":
        response = await api.get(f"/api/jobs/{job_id}/events", params={"after": after, "wait": 5})
        assert response.status_code == 200, response.text
        batch = response.json()["events"]
        seen += batch
        after = seen[-1]["seq"] if seen else after
    return seen


async def test_a_three_call_pipeline_streams_to_every_follower_and_costs_what_was_billed(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    job_id = await submit(api, "pipeline", {"topic": "leases and fencing"})
    created = (await api.get(f"/api/jobs/{job_id}")).json()
    sse = asyncio.create_task(read_stream(api, created["events_url"]))
    polled = asyncio.create_task(long_poll(api, job_id))
    # The CLI, piped: its stdout is the text, its progress lines go to stderr.
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobstream.cli", "follow", job_id, "--url", str(api.base_url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with running_worker(ai_settings, pool=pool, app=app):
        await wait_for_status(pool, uuid.UUID(job_id), "succeeded")
        frames, polls, (printed, said) = await asyncio.gather(sse, polled, cli.communicate())
    job = (await api.get(f"/api/jobs/{job_id}")).json()
    assert job["job"] == "pipeline"
    assert job["progress"] == {"fraction": 1.0, "message": "done"}  # the last, for a reload
    assert job["input"] == {"topic": "leases and fencing", "provider": "openai", "max_tokens": 6}
    text = job["result"]["text"]
    assert text.count("\n") == 2 and len(text) > 10
    assert reassemble_frames(frames.events) == reassemble_frames(polls) == text
    assert cli.returncode == 0 and printed.decode() == text + "\n", said.decode()
    assert [line for line in said.decode().splitlines() if line.startswith("progress")] == [
        "progress 0% outline", "progress 33% draft", "progress 66% polish", "progress 100% done"
    ]  # fmt: skip
    for events in (frames.events, polls):
        progress = [(e["fraction"], e["message"]) for e in events if e["type"] == "progress"]
        assert progress == [
            (0.0, "outline"), (1 / 3, "draft"), (2 / 3, "polish"), (1.0, "done")
        ]  # fmt: skip
    # Each progress event follows the text emitted before it: the second comes after the first
    # call's whole answer and its newline.
    log = await event_list(pool, uuid.UUID(job_id))
    draft_at = next(
        i for i, e in enumerate(log) if e.type == "progress" and e.data["message"] == "draft"
    )
    before_draft = reassemble(log[:draft_at])
    assert before_draft.endswith("\n") and before_draft.count("\n") == 1
    # Three calls, each fed the last one's answer; every one costed in the attempt's row.
    records = fake.stats().records
    assert [r.prompt.split()[0] for r in records] == ["outline", "draft", "polish"]
    (attempt,) = await attempt_rows(pool, uuid.UUID(job_id))
    assert attempt["outcome"] == "succeeded" and attempt["cost_known"]
    assert attempt["cost_usd"] == billed_usd(records)
    assert attempt["output_tokens"] == sum(r.tokens_sent for r in records)
    row = await job_row(pool, uuid.UUID(job_id))
    assert row["charged_usd"] == attempt["cost_usd"]
    assert await tenant_money(pool) == (Decimal(0), attempt["cost_usd"])


async def test_a_sync_handler_returns_a_validated_output_beside_its_text(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient
) -> None:
    counted = await submit(api, "count_words", {"text": "durable jobs on postgres"})
    echoed = await submit(api, "echo", {"text": "said once"})
    async with running_worker(ai_settings, pool=pool, app=app):
        for job_id in (counted, echoed):
            await wait_for_status(pool, uuid.UUID(job_id), "succeeded")
    job = (await api.get(f"/api/jobs/{counted}")).json()
    assert job["result"]["output"] == {"words": 4, "first": "durable"}
    assert job["result"]["text"] == "DURABLE JOBS ON POSTGRES"
    log = await event_list(pool, uuid.UUID(counted))
    assert [e.data for e in log if e.type == "progress"] == [
        {"fraction": 0.5, "message": "counting"}
    ]
    echo = (await api.get(f"/api/jobs/{echoed}")).json()
    assert echo["result"]["text"] == "said once" and "output" not in echo["result"]
    assert reassemble(await event_list(pool, uuid.UUID(echoed))) == "said once"


async def test_bad_input_is_refused_before_anything_is_queued_or_reserved(
    pool: asyncpg.Pool, api: httpx.AsyncClient
) -> None:
    unknown = await api.post("/api/jobs", json={"job": "nope", "input": {}})
    assert unknown.status_code == 422
    assert unknown.headers["content-type"] == "application/problem+json"
    assert [e["field"] for e in unknown.json()["errors"]] == ["job"]
    wrong = await api.post(
        "/api/jobs",
        json={"job": "pipeline", "input": {"topic": 7, "max_tokens": "many"}, "priority": 99},
        headers={"Idempotency-Key": "bad-input-1"},
    )
    assert wrong.status_code == 422
    errors = {e["field"]: e for e in wrong.json()["errors"]}
    assert set(errors) == {"input.topic", "input.max_tokens", "priority"}
    assert errors["input.topic"]["type"] == "string_type"
    missing = await api.post("/api/jobs", json={"job": "count_words", "input": {}})
    assert [e["field"] for e in missing.json()["errors"]] == ["input.text"]
    for table in ("jobs", "tenant_jobs", "job_events"):
        assert await pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    assert await tenant_money(pool) == (Decimal(0), Decimal(0))


async def test_a_worker_without_a_job_leaves_it_queued_for_one_that_has_it(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient
) -> None:
    mine = await submit(api, "echo", {"text": "for a newer worker"})
    built_in = (
        await api.post(
            "/api/jobs", json={"prompt": "hi", "provider": "simulated", "simulate": {"tokens": 2}}
        )
    ).json()["id"]
    async with running_worker(ai_settings, pool=pool) as old:  # no app: the built-in job only
        assert old.job_names == ["llm"]
        await wait_for_status(pool, uuid.UUID(built_in), "succeeded")
        old.wake()
        await wait_for_status(pool, uuid.UUID(built_in), "succeeded")  # a second round ran
        assert (await job_row(pool, uuid.UUID(mine)))["status"] == "queued"
        await eventually(lambda: _async(old.results), lambda r: r == {"succeeded": 1}, what="1")
    async with running_worker(ai_settings, pool=pool, app=app) as new:
        assert "echo" in new.job_names
        job = await wait_for_status(pool, uuid.UUID(mine), "succeeded")
    assert job["result"]["text"] == "for a newer worker"


async def test_a_cancel_cancels_the_handler_and_closes_its_request(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    fake.push(Reply(kind="hang", after_tokens=2))
    job_id = await submit(api, "held", {"prompt": "wait for it"})
    seen = probe(job_id)
    # The hang must outlast the cancel: with the fixture's 0.4 s idle timeout, a loaded machine
    # was seen to end the stream as idle (a provider error, not a cancel) before the cancel came.
    settings = ai_settings.replace(openai_idle_timeout_s=30.0)
    async with running_worker(settings, pool=pool, app=app):
        await signalled(seen.started.wait(), what="the handler started")
        await fake.wait_until(lambda s: s.in_flight == 1)
        response = await api.post(f"/api/jobs/{job_id}/cancel")
        assert response.status_code in (200, 202), response.text
        asked = time.monotonic()
        await signalled(seen.cancelled.wait(), what="the handler is cancelled", timeout_s=1.0)
        assert time.monotonic() - asked < 1.0
        await fake.wait_until(lambda s: s.in_flight == 0)
        job = await wait_for_status(pool, uuid.UUID(job_id), "cancelled")
    assert fake.stats().records[0].outcome != "running"
    assert job["result"] is None


async def test_a_zombie_attempt_can_neither_emit_nor_write_progress_nor_complete(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient
) -> None:
    clock = manual_clock()
    settings = ai_settings.replace(lease_s=LEASE_S)
    job_id = await submit(api, "held", {"provider": "gate"})
    seen = probe(job_id)
    async with running_worker(
        settings.replace(worker_id="zombie", worker_concurrency=1), pool=pool, clock=clock, app=app
    ) as zombie:
        await signalled(seen.started.wait(), what="the first attempt holds")
        await expire_and_reap(pool, clock)
        first_end = max(e.seq for e in await event_list(pool, uuid.UUID(job_id)))
        # The second attempt takes the job and holds it too.
        user_jobs.PROBES[job_id] = second = user_jobs.Probe()
        async with running_worker(
            settings.replace(worker_id="current"), pool=pool, clock=clock, app=app
        ):
            await signalled(second.started.wait(), what="the second attempt holds")
            # The zombie wakes: its progress is refused, and it stops without a word written.
            seen.gate.set()
            await eventually(
                lambda: _async(zombie.results), lambda r: r == {"fenced": 1}, what="fenced"
            )
            assert seen.refused == ["progress"]
            second.gate.set()
            job = await wait_for_status(pool, uuid.UUID(job_id), "succeeded")
    log = await event_list(pool, uuid.UUID(job_id))
    assert max(e.seq for e in log if e.attempt == 1) <= first_end
    assert job["result"]["text"] == reassemble(log) == "attempt 2 began. late textfinished."
    first, second_row = await attempt_rows(pool, uuid.UUID(job_id))
    assert (first["outcome"], second_row["outcome"]) == ("lost", "succeeded")


async def _async(value: Any) -> Any:
    return value


@pytest.mark.parametrize(
    ("kind", "failures", "status", "attempts", "error_class"),
    [
        ("transient", 1, "succeeded", 2, None),
        ("error", 99, "dead", 3, "KeyError"),
        ("permanent", 99, "failed", 1, "permanent"),
        ("bad_output", 99, "failed", 3, "invalid_output"),  # 1 + invalid_output_retries
    ],
)
async def test_each_kind_of_failure_follows_its_rule(
    pool: asyncpg.Pool,
    ai_settings: Settings,
    api: httpx.AsyncClient,
    kind: str,
    failures: int,
    status: str,
    attempts: int,
    error_class: str | None,
) -> None:
    job_id = await submit(api, "fail", {"kind": kind, "failures": failures})
    async with running_worker(ai_settings, pool=pool, app=app):
        row = await wait_for_status(pool, uuid.UUID(job_id), status)
    assert row["attempts"] == attempts
    job = (await api.get(f"/api/jobs/{job_id}")).json()
    rows = await pool.fetch(
        "SELECT error_class, error_trace FROM job_attempts WHERE job_id = $1 ORDER BY attempt",
        uuid.UUID(job_id),
    )
    if error_class is None:
        assert job["result"]["output"] == {"words": 2, "first": "attempt"}
        assert job["result"]["text"] == "attempt 2 "
        return
    assert job["error"]["class"] == error_class
    # The traceback of a bug in the job's code is kept for operators, never shown to clients.
    traces = [r["error_trace"] for r in rows]
    if kind == "error":
        assert all("KeyError" in t and "user_jobs.py" in t for t in traces)
        assert "Traceback" not in (await api.get(f"/api/jobs/{job_id}")).text
    else:
        assert traces == [None] * attempts


async def test_a_call_that_could_pass_max_cost_is_refused_before_it_is_sent(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    job_id = await submit(api, "budgeted", {"calls": 3})
    async with running_worker(ai_settings, pool=pool, app=app):
        row = await wait_for_status(pool, uuid.UUID(job_id), "failed")
    assert row["error"]["class"] == "budget"
    assert fake.stats().requests == 1  # the second call was never sent
    (attempt,) = await attempt_rows(pool, uuid.UUID(job_id))
    assert attempt["cost_usd"] == billed_usd(fake.stats().records)
    assert await tenant_money(pool) == (Decimal(0), Decimal(0))  # failed: nothing charged


async def test_the_api_describes_each_job_with_its_models_schemas(api: httpx.AsyncClient) -> None:
    types = {t["name"]: t for t in (await api.get("/api/job-types")).json()["jobs"]}
    assert {"llm", "pipeline", "count_words", "echo"} <= set(types)
    assert types["count_words"]["input_schema"]["required"] == ["text"]
    assert types["count_words"]["output_schema"]["properties"]["words"] == {
        "title": "Words",
        "type": "integer",
    }
    assert types["pipeline"]["description"].startswith("Three model calls")
    document = (await api.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert schemas["Job.count_words.Input"]["properties"]["text"]["minLength"] == 1
    assert schemas["Job.count_words.Output"]["required"] == ["words", "first"]
    create = document["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["application/json"]
    refs = [variant["$ref"].rsplit("/", 1)[1] for variant in create["schema"]["oneOf"]]
    assert refs[0] == "JobCreate" and "Job.pipeline.Create" in refs
    pipeline = schemas["Job.pipeline.Create"]["properties"]
    assert pipeline["input"]["$ref"].endswith("/Job.pipeline.Input")
    assert pipeline["timeout_s"]["default"] == 60  # the decorator's, not the built-in job's


async def test_max_cost_is_reserved_at_create_and_a_budget_too_small_refuses_it(
    pool: asyncpg.Pool, api: httpx.AsyncClient
) -> None:
    await pool.execute("UPDATE tenants SET budget_usd = 0.00015 WHERE id = 'default'")
    first = await submit(api, "budgeted", {"calls": 1})  # its decorator's 0.0001
    assert (await job_row(pool, uuid.UUID(first)))["reserved_usd"] == Decimal("0.0001")
    over = await api.post(
        "/api/jobs", json={"job": "budgeted", "input": {"calls": 1}, "max_cost_usd": 0.0001}
    )
    assert over.status_code == 402, over.text
    smaller = await submit(api, "budgeted", {"calls": 1}, max_cost_usd=0.00005)
    assert (await job_row(pool, uuid.UUID(smaller)))["reserved_usd"] == Decimal("0.00005")
    assert await tenant_money(pool) == (Decimal("0.00015"), Decimal(0))
