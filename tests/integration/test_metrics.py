"""/metrics: Prometheus text that parses, with figures derived from the tables."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import asyncpg
import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from jobstream import pauses, retention, tenants
from jobstream.clock import DatabaseClock
from jobstream.ports import free_port
from jobstream.server import listeners
from jobstream.server.app import create_app
from jobstream.server.shutdown import DrainingServer
from jobstream.settings import Settings
from tests.support.api import PROBLEM
from tests.support.http_server import http_client, serve
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


OPERATOR_KEY = "operator-metrics-key"


def assert_401(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("keys_on", [True, False])
async def test_a_metrics_key_is_required_wherever_it_is_set(
    settings: Settings, pool: asyncpg.Pool, keys_on: bool
) -> None:
    tenant_key = await tenants.create(pool, "acme")
    app = create_app(settings.replace(require_api_key=keys_on, metrics_key=OPERATOR_KEY))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        assert_401(await http.get("/metrics"))
        for wrong in (f"Bearer {tenant_key}", "Bearer nope", f"Basic {OPERATOR_KEY}"):
            assert_401(await http.get("/metrics", headers={"Authorization": wrong}))
        answer = await http.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR_KEY}"})
        assert answer.status_code == 200, answer.text
        assert "jobstream_jobs_created_total" in samples_names(answer.text)


async def test_with_keys_on_and_no_metrics_key_metrics_is_refused(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    """Its figures are every tenant's: a tenant's key must not read them either."""
    tenant_key = await tenants.create(pool, "acme")
    app = create_app(settings.replace(require_api_key=True))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        assert_401(await http.get("/metrics"))
        assert_401(await http.get("/metrics", headers={"Authorization": f"Bearer {tenant_key}"}))


def samples_names(text: str) -> set[str]:
    return {name for name, _ in samples(text)}


@contextlib.asynccontextmanager
async def serving_with_metrics_port(settings: Settings) -> AsyncIterator[tuple[str, str]]:
    """The app as `python -m jobstream.server` serves it with JOBSTREAM_METRICS_PORT set: one
    uvicorn on the sockets server/listeners.py binds. Yields (API's URL, metrics listener's URL)."""
    api_port = free_port()
    metrics_port = free_port()
    while metrics_port == api_port:
        metrics_port = free_port()
    settings = settings.replace(metrics_port=metrics_port, metrics_host="127.0.0.1")
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=api_port, log_config=None, lifespan="on",
        server_header=False, timeout_graceful_shutdown=2,
    )  # fmt: skip
    server = DrainingServer(config)
    serving = asyncio.create_task(server.serve(sockets=listeners.sockets(config, settings)))
    listening = asyncio.create_task(server.listening.wait())
    try:
        await asyncio.wait({serving, listening}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert server.listening.is_set(), "the server did not start"
        yield f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{metrics_port}"
    finally:
        listening.cancel()
        server.should_exit = True
        await asyncio.wait_for(serving, 15)


@pytest.mark.parametrize("metrics_key", ["", OPERATOR_KEY])
async def test_the_metrics_port_serves_metrics_and_health_and_the_api_port_no_metrics(
    settings: Settings, metrics_key: str
) -> None:
    keyed = settings.replace(require_api_key=True, metrics_key=metrics_key)
    async with (
        serving_with_metrics_port(keyed) as (api_url, metrics_url),
        http_client(api_url, timeout=30) as api,
        http_client(metrics_url, timeout=30) as scraper,
    ):
        operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
        missing = await api.get("/metrics", headers=operator)
        assert missing.status_code == 404, missing.text
        assert missing.headers["content-type"] == PROBLEM
        assert_401(await api.get("/api/jobs"))  # the API itself is served as before
        assert (await api.get("/healthz")).status_code == 200

        # A scraper reaches it by whatever address it knows: any Host is answered here.
        headers = {**(operator if metrics_key else {}), "Host": "10.0.0.7:9464"}
        scraped = await scraper.get("/metrics", headers=headers)
        assert scraped.status_code == 200, scraped.text
        assert "jobstream_jobs_created_total" in samples_names(scraped.text)
        assert scraped.headers["x-content-type-options"] == "nosniff"
        if metrics_key:
            assert_401(await scraper.get("/metrics"))
        for path in ("/healthz", "/readyz"):
            assert (await scraper.get(path)).status_code == 200, path
        for path in ("/api/jobs", "/", "/openapi.json", "/static/app.js"):
            assert (await scraper.get(path, headers=operator)).status_code == 404, path
