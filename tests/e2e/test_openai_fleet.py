"""Three `python -m worker` processes and a `python -m server` against the fake OpenAI server
(its own thread, real HTTP): the provider limit holds across processes, a 429 pauses every
worker, the ledger reconciles with what the provider billed, /metrics agrees with the tables,
and every process logs JSON lines that name the job, attempt, run token and worker.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobstream.ports import free_port
from tests.support.fake_openai import FakeOpenAI, Reply, RequestRecord, expected_text
from tests.support.http_server import http_client
from tests.support.openai_jobs import (
    KEY,
    MAX_TOKENS,
    MODEL,
    billed_usd,
    tenant_money,
)
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, Processes, processes

LIMIT = 4
RETRY_AFTER_S = 1.5
GOOD_JOBS = 50


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    # Each answer takes a while (8 tokens, 20 ms apart), so that attempts overlap and the limit
    # is what holds them back.
    async with FakeOpenAI(api_key=KEY, default=Reply(token_delay_s=0.02)) as fake:
        yield fake


@dataclass
class Fleet:
    server: ManagedProcess
    workers: list[ManagedProcess]
    http: httpx.AsyncClient

    async def create(self, prompt: str) -> uuid.UUID:
        body = {"prompt": prompt, "provider": "openai", "max_tokens": MAX_TOKENS}
        response = await self.http.post("/api/jobs", json=body)
        assert response.status_code == 202, response.text
        return uuid.UUID(response.json()["id"])


async def start_fleet(
    group: Processes, database_url: str, fake: FakeOpenAI, *, workers: int
) -> Fleet:
    port = free_port()
    env = {
        "DATABASE_URL": database_url,
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_LOG_JSON": "true",
        "JOBSTREAM_POLL_INTERVAL_S": "0.1",
        "JOBSTREAM_BACKOFF_BASE_S": "0",
        "JOBSTREAM_BACKOFF_MAX_S": "0",
        "JOBSTREAM_PROVIDER_CONCURRENCY": f"openai={LIMIT}",
        "JOBSTREAM_OPENAI_BASE_URL": fake.base_url,
        "JOBSTREAM_OPENAI_API_KEY": KEY,
        "JOBSTREAM_OPENAI_MODEL": MODEL,
        "JOBSTREAM_OPENAI_IDLE_TIMEOUT_S": "2",
    }
    spawned = [
        group.spawn("worker", {**env, "JOBSTREAM_WORKER_ID": f"w{i}"}, name=f"worker-{i}")
        for i in range(1, workers + 1)
    ]
    server = group.spawn("server", env, name="server")
    # Logged once uvicorn listens (server/shutdown.py): a request sent at once is answered.
    await server.wait_for_log("server_ready", timeout_s=30)
    http = http_client(base_url=f"http://127.0.0.1:{port}")
    return Fleet(server, spawned, http)


async def wait_until_finished(pool: asyncpg.Pool, count: int, *, timeout_s: float) -> None:
    await eventually(
        lambda: pool.fetchval("SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL"),
        lambda n: n == count,
        what=f"{count} jobs finished",
        timeout_s=timeout_s,
        interval_s=0.1,
    )


def by_attempt(
    records: tuple[RequestRecord, ...], prompts: dict[str, uuid.UUID]
) -> dict[tuple[uuid.UUID, int], RequestRecord]:
    """The fake's requests by (job, attempt): a job's k-th request is its k-th attempt."""
    seen: dict[uuid.UUID, int] = defaultdict(int)
    out = {}
    for record in sorted(records, key=lambda r: r.id):
        job_id = prompts[record.prompt]
        seen[job_id] += 1
        out[(job_id, seen[job_id])] = record
    return out


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_three_workers_fifty_jobs_limit_pause_ledger_and_metrics(
    pool: asyncpg.Pool, database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    await pool.execute("UPDATE tenants SET budget_usd = 1 WHERE id = 'default'")
    rate_limited = Reply(kind="error", status=429, retry_after=str(RETRY_AFTER_S), times=1)
    flaky = Reply(kind="error", status=500, times=1)
    prompts: dict[str, uuid.UUID] = {}
    with processes(tmp_path) as group:
        fleet = await start_fleet(group, database_url, fake, workers=3)
        try:
            for i in range(GOOD_JOBS):
                prompt = f"job {i} alpha beta gamma"
                if i == 20:
                    prompt += f" {rate_limited.marker()}"
                if i == 30:
                    prompt += f" {flaky.marker()}"
                prompts[prompt] = await fleet.create(prompt)
            invalid = [f"invalid {i} {Reply(kind='error', status=400).marker()}" for i in (1, 2)]
            for prompt in invalid:
                prompts[prompt] = await fleet.create(prompt)
            await wait_until_finished(pool, len(prompts), timeout_s=60)
            metrics_text = (await fleet.http.get("/metrics")).text
        finally:
            await fleet.http.aclose()
    stats = fake.stats()
    attempts_rows = await pool.fetch("SELECT * FROM job_attempts ORDER BY started_at")
    jobs_rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM jobs")}

    # The limit held across three processes, and was reached: it, not luck, held them back.
    assert stats.max_in_flight == LIMIT, stats
    # Every good job succeeded exactly once, with the answer of its successful request.
    for prompt, job_id in prompts.items():
        job = jobs_rows[job_id]
        if prompt in invalid:
            assert (job["status"], job["attempts"]) == ("failed", 1)
            continue
        assert job["status"] == "succeeded"
        assert job["result"]["text"] == expected_text(prompt, MAX_TOKENS)
        won = [a for a in attempts_rows if a["job_id"] == job_id and a["outcome"] == "succeeded"]
        assert len(won) == 1
    retried = {jobs_rows[prompts[p]]["attempts"] for p in prompts if "[[fake:" in p}
    assert retried == {1, 2}  # the 429'd and the 500'd job took two, the invalid ones one
    assert stats.requests == len(attempts_rows) == GOOD_JOBS + 2 + len(invalid)

    # A 429 paused every worker: no request went out for an attempt claimed after the pause
    # began until Retry-After had passed. Attempts claimed before it (already on their way)
    # may still land in the window.
    requests = by_attempt(stats.records, prompts)
    (limited,) = [r for r in stats.records if r.status == 429]
    pause = await pool.fetchrow("SELECT * FROM provider_state WHERE provider = 'openai'")
    assert pause is not None
    paused_at: datetime = pause["paused_at"]
    paused_until: datetime = pause["paused_until"]
    assert limited.ended_at is not None
    assert paused_until.timestamp() >= limited.ended_at + RETRY_AFTER_S
    waited = 0
    for attempt in attempts_rows:
        request = requests[(attempt["job_id"], attempt["attempt"])]
        if attempt["started_at"] >= paused_at:
            assert attempt["started_at"] >= paused_until
            assert request.started_at >= paused_until.timestamp()
            waited += 1
        elif request.started_at > limited.ended_at:
            assert request.started_at - limited.ended_at < RETRY_AFTER_S
    assert waited > 0  # jobs did wait, queued, through the pause
    in_window = [
        r for r in stats.records if limited.ended_at < r.started_at < paused_until.timestamp()
    ]
    assert len(in_window) < LIMIT + 3  # only what was already claimed

    # The ledger reconciles: what we recorded is what the provider billed, to the last digit,
    # and the tenant paid exactly the accepted jobs' prices and holds no reservation.
    assert all(a["cost_known"] for a in attempts_rows)
    recorded = sum((a["cost_usd"] for a in attempts_rows), start=Decimal(0))
    assert recorded == billed_usd(stats.records) > 0
    charged = sum(
        (j["charged_usd"] for j in jobs_rows.values() if j["status"] == "succeeded"),
        start=Decimal(0),
    )
    assert await tenant_money(pool) == (Decimal(0), charged)
    accepted_cost = sum(
        (a["cost_usd"] for a in attempts_rows if a["outcome"] == "succeeded"), start=Decimal(0)
    )
    assert charged == accepted_cost  # refused attempts cost nothing, so nothing is ours alone

    # /metrics, from another process, parses and matches the tables.
    values = metric_samples(metrics_text)
    assert values[("jobstream_jobs_created_total", ())] == len(prompts)
    assert values[("jobstream_jobs_accepted_total", ())] == GOOD_JOBS
    # The gauge holds the jobs not finished (none now); the finished ones are the counters'.
    assert values[("jobstream_jobs", (("status", "running"),))] == 0
    assert ("jobstream_jobs", (("status", "failed"),)) not in values
    assert len(invalid) == sum(j["status"] == "failed" for j in jobs_rows.values())
    by_outcome: dict[str, int] = defaultdict(int)
    for a in attempts_rows:
        by_outcome[a["outcome"]] += 1
    for outcome, n in by_outcome.items():
        key = ("jobstream_attempts_total", (("outcome", outcome), ("provider", "openai")))
        assert values[key] == n
    assert values[("jobstream_provider_cost_usd_total", (("provider", "openai"),))] == float(
        recorded
    )
    assert values[("jobstream_unknown_outcomes_total", (("provider", "openai"),))] == 0
    assert values[("jobstream_retries_total", ())] == 2
    assert values[("jobstream_retry_ratio", ())] == pytest.approx(2 / len(attempts_rows))
    assert values[("jobstream_charged_usd_total", ())] == float(charged)
    assert values[("jobstream_cost_per_accepted_job_usd", ())] == pytest.approx(
        float(accepted_cost) / GOOD_JOBS
    )
    assert values[("jobstream_queue_depth", ())] == 0
    assert values[("jobstream_lease_expirations_total", ())] == 0
    assert values[("jobstream_queue_wait_seconds_count", ())] == len(prompts)
    assert values[("jobstream_run_duration_seconds_count", ())] == len(attempts_rows)
    events = await pool.fetchval("SELECT count(*) FROM job_log")
    assert values[("jobstream_events_appended_total", ())] == events


STATE_CHANGES = {"attempt_started", "attempt_succeeded", "attempt_failed"}


def json_lines(process: ManagedProcess) -> list[dict[str, Any]]:
    """Every line the process wrote, each parsed as JSON: a line that is not JSON fails here."""
    return [json.loads(line) for line in process.output().splitlines() if line.strip()]


async def test_processes_log_one_json_line_per_state_change(
    pool: asyncpg.Pool, database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    with processes(tmp_path) as group:
        fleet = await start_fleet(group, database_url, fake, workers=1)
        try:
            retried = await fleet.create(
                f"retry me {Reply(kind='error', status=502, times=1).marker()}"
            )
            await wait_until_finished(pool, 1, timeout_s=20)
        finally:
            await fleet.http.aclose()
        for process in (fleet.server, *fleet.workers):
            process.terminate()
            # uvicorn re-raises the SIGTERM it handled once it has shut down.
            assert await process.wait_async(10) in (0, -15), process.output()
    (worker,) = fleet.workers
    lines = json_lines(worker)
    assert all(line["worker_id"] == "w1" for line in lines)
    changes = [line for line in lines if line["event"] in STATE_CHANGES]
    # queued -> running -> queued (the 502) -> running -> succeeded: one line each.
    assert [(c["event"], c["attempt"], c["status"]) for c in changes] == [
        ("attempt_started", 1, "running"),
        ("attempt_failed", 1, "queued"),
        ("attempt_started", 2, "running"),
        ("attempt_succeeded", 2, "succeeded"),
    ]
    tokens = await pool.fetch("SELECT attempt, run_token FROM job_attempts ORDER BY attempt")
    for change in changes:
        assert change["job_id"] == str(retried)
        assert change["run_token"] == str(tokens[change["attempt"] - 1]["run_token"])
        assert change["level"] == "info" and change["timestamp"]
    assert changes[1]["cost_known"] is True and changes[1]["cost_usd"] == "0"
    # The server's lines, uvicorn's included, are the same JSON.
    server_lines = json_lines(fleet.server)
    (created,) = [line for line in server_lines if line["event"] == "job_created"]
    assert (created["job_id"], created["status"]) == (str(retried), "queued")
    # The first request after the fleet's /healthz probes is the create.
    access = [
        line for line in server_lines
        if line["event"] == "http_request" and line["path"] != "/healthz"
    ]  # fmt: skip
    assert {"method": "POST", "path": "/api/jobs", "status_code": 202}.items() <= access[0].items()
    assert {line["logger"] for line in server_lines} >= {"uvicorn.error", "uvicorn.access"}
