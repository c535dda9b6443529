"""/metrics: Prometheus text that parses, with figures derived from the tables."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from jobstream import pauses, retention
from jobstream.clock import DatabaseClock
from jobstream.settings import Settings
from tests.support.sse_client import read_stream
from tests.support.workers import running_worker, wait_for_job


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_parse_and_match_the_tables_after_a_mixed_run(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    fast = {"tokens_per_second": 0, "first_token_delay_s": 0, "tokens": 5}
    async with running_worker(settings, pool=pool):
        ok = [
            (await client.post("/api/jobs", json={"prompt": f"p{i}", "simulate": fast})).json()
            for i in range(3)
        ]
        failing = (
            await client.post(
                "/api/jobs",
                json={
                    "prompt": "bad",
                    "simulate": {**fast, "faults": [{"attempt": 1, "kind": "permanent"}]},
                },
            )
        ).json()
        for job in [*ok, failing]:
            await wait_for_job(
                pool, uuid.UUID(job["id"]), lambda j: j["finished_at"] is not None, what="end"
            )
    values = samples((await client.get("/metrics")).text)
    assert values[("jobstream_jobs_created_total", ())] == 4
    assert values[("jobstream_jobs_accepted_total", ())] == 3
    # The gauge holds the jobs not finished; the finished ones are the counters' business.
    assert values[("jobstream_jobs", (("status", "running"),))] == 0
    assert ("jobstream_jobs", (("status", "succeeded"),)) not in values
    outcomes = await pool.fetch("SELECT outcome, count(*) AS n FROM job_attempts GROUP BY outcome")
    for row in outcomes:
        key = ("jobstream_attempts_total", (("outcome", row["outcome"]), ("provider", "simulated")))
        assert values[key] == row["n"]
    cost = await pool.fetchval("SELECT sum(cost_usd) FROM job_attempts")
    assert values[("jobstream_provider_cost_usd_total", (("provider", "simulated"),))] == float(
        cost
    )
    events = await pool.fetchval("SELECT count(*) FROM job_log")
    assert values[("jobstream_events_appended_total", ())] == events
    assert values[("jobstream_queue_wait_seconds_count", ())] == 4
    assert values[("jobstream_run_duration_seconds_bucket", (("le", "600"),))] == 4
    assert values[("jobstream_queue_depth", ())] == 0


async def test_a_paused_provider_shows_the_seconds_its_pause_has_left(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await pauses.pause(pool, "openai", 60, DatabaseClock())
    values = samples((await client.get("/metrics")).text)
    assert 58 < values[("jobstream_provider_pause_seconds", (("provider", "openai"),))] <= 60


async def test_notification_lag_is_measured_for_events_read_live(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    simulate = {"tokens_per_second": 200, "first_token_delay_s": 0, "tokens": 20}
    job = (await client.post("/api/jobs", json={"prompt": "lag", "simulate": simulate})).json()
    following = asyncio.Event()  # set at the first event: the stream is live before the run
    reading = asyncio.create_task(
        read_stream(client, job["events_url"], on_event=lambda _: following.set())
    )
    await asyncio.wait_for(following.wait(), 10)
    async with running_worker(settings, pool=pool):
        received = await asyncio.wait_for(reading, 20)
    assert received.events[-1]["type"] == "done"
    values = samples((await client.get("/metrics")).text)
    count = values[("jobstream_notification_lag_seconds_count", ())]
    assert count >= 1
    assert values[("jobstream_notification_lag_seconds_bucket", (("le", "+Inf"),))] == count
    assert values[("jobstream_hub_reads_total", ())] >= count
    # Loopback, one machine: live reads land well within a second of their commit.
    assert values[("jobstream_notification_lag_seconds_bucket", (("le", "1"),))] >= 1


async def test_counters_of_backends_that_are_gone_fold_into_one_row(pool: asyncpg.Pool) -> None:
    await pool.execute(
        "INSERT INTO metric_totals (backend, provider, jobs_created, cost_usd, run_counts)"
        " VALUES (0, 'p', 1, 0.5, '{1,1,1,1,1,1,1,1,1,1,1,1,1}'),"
        " (-1, 'p', 2, 0.25, '{0,0,0,0,0,0,0,0,0,0,0,1,1}'), (-2, 'p', 3, 0, NULL),"
        " (0, 'q', 7, 0, NULL), (-1, 'r', 4, 0, NULL)"
    )
    async with pool.acquire() as conn:
        assert await retention.fold_counters(conn) == 2  # p and r: nothing of q's is gone
    rows = await pool.fetch(
        "SELECT * FROM metric_totals WHERE provider IN ('p', 'q', 'r') ORDER BY provider"
    )
    assert [(r["backend"], r["provider"], r["jobs_created"], r["cost_usd"]) for r in rows] == [
        (0, "p", 6, Decimal("0.75")),
        (0, "q", 7, Decimal(0)),
        (0, "r", 4, Decimal(0)),
    ]
    assert rows[0]["run_counts"] == [1] * 11 + [2, 2]
