"""What a job may ask of the simulated provider (issue 9, defect 10).

Before: one tenant held every worker slot for an hour with free simulated jobs
(`first_token_delay_s` and `timeout_s` at 3,600), a client chose its own simulated price
(`simulate.cost_per_token`), and nothing could switch the simulator off in production.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.api import PROBLEM, job_count
from tests.support.http_server import http_client, serve


@asynccontextmanager
async def client_of(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(settings)) as url, http_client(base_url=url) as http:
        yield http


async def refused_fields(client: httpx.AsyncClient, body: dict[str, Any]) -> list[str]:
    response = await client.post("/api/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    return [e["field"] for e in response.json()["errors"]]


async def test_an_hour_long_simulated_job_is_refused_at_create(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    async with client_of(settings) as client:  # the default cap, 300 s
        hour = {"first_token_delay_s": 3600, "tokens": 1}
        fields = await refused_fields(client, {"prompt": "p", "simulate": hour, "timeout_s": 3600})
        assert fields == ["simulate.first_token_delay_s"]
        assert await job_count(pool) == 0


async def test_every_way_to_hold_a_slot_past_the_cap_is_a_422_naming_its_field(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    async with client_of(settings.replace(simulated_max_s=60)) as client:
        cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
            ({"first_token_delay_s": 61}, {}, "simulate.first_token_delay_s"),
            # 512 tokens (max_tokens) at 10 a second: 51 s of pauses after a 10 s first token.
            (
                {"tokens_per_second": 10, "first_token_delay_s": 10},
                {},
                "simulate.tokens_per_second",
            ),
            (
                {"faults": [{"kind": "rate_limited", "retry_after_s": 3600}]},
                {},
                "simulate.faults[0].retry_after_s",
            ),
            ({"faults": [{"kind": "timeout"}]}, {"timeout_s": 61}, "timeout_s"),
        ]
        for simulate, more, field in cases:
            body = {"prompt": "p", "simulate": simulate, **more}
            assert await refused_fields(client, body) == [field], simulate
        assert await job_count(pool) == 0
        at_the_cap: list[dict[str, Any]] = [
            {"prompt": "p", "simulate": {"first_token_delay_s": 60, "tokens": 1}},
            {"prompt": "p", "simulate": {"tokens_per_second": 0}, "max_tokens": 32_768},
            {"prompt": "p", "simulate": {"faults": [{"kind": "timeout"}]}, "timeout_s": 60},
            # Another provider ignores `simulate`: nothing in it holds a slot.
            {"prompt": "p", "provider": "openai", "simulate": {"first_token_delay_s": 3600}},
        ]
        for body in at_the_cap:
            response = await client.post("/api/jobs", json=body)
            assert response.status_code == 202, response.text


async def test_the_simulated_price_is_the_servers_and_a_job_cannot_set_it(
    settings: Settings, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    # The operator's price file sets the simulator's price (jobstream/prices.py).
    prices_file = tmp_path / "prices.toml"
    prices_file.write_text('[simulated.models]\n"simulated" = { input = 0, output = 1000 }\n')
    async with client_of(settings.replace(prices_file=str(prices_file))) as client:
        free = {"prompt": "p", "max_tokens": 100, "simulate": {"cost_per_token": 0}}
        assert await refused_fields(client, free) == ["simulate.cost_per_token"]
        batch = await client.post("/api/jobs/batch", json={"jobs": [free]})
        assert batch.json()["results"][0]["errors"][0]["field"] == "simulate.cost_per_token"
        assert await job_count(pool) == 0
        created = await client.post("/api/jobs", json={"prompt": "p", "max_tokens": 100})
        assert created.status_code == 202
    # 100 tokens at the server's $1,000 a million, reserved against the budget.
    reserved = await pool.fetchval("SELECT reserved_usd FROM jobs")
    assert reserved == Decimal("0.1")


async def test_with_the_simulator_switched_off_simulated_jobs_are_refused(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    production = settings.replace(simulated=False, default_provider="openai")
    async with client_of(production) as client:
        named = await client.post("/api/jobs", json={"prompt": "p", "provider": "simulated"})
        assert named.status_code == 422 and named.headers["content-type"] == PROBLEM
        (error,) = named.json()["errors"]
        assert error == {
            "field": "provider",
            "message": "the simulated provider is switched off on this server",
        }
        asks = {"prompt": "p", "provider": "openai", "simulate": {"tokens": 2}}
        assert await refused_fields(client, asks) == ["simulate"]
        batch = await client.post(
            "/api/jobs/batch", json={"jobs": [{"prompt": "a", "provider": "simulated"}]}
        )
        assert batch.json()["results"][0]["status"] == 422
        assert await job_count(pool) == 0
        plain = await client.post("/api/jobs", json={"prompt": "p"})
        assert plain.status_code == 202, plain.text
    assert await pool.fetchval("SELECT provider FROM jobs") == "openai"
