"""Prices from the catalogue (jobstream/prices.py) through a live server and worker against the
fake OpenAI: a model the catalogue does not know costs its provider's default price and its
attempt says so; an operator's price file changes what a real job reserves and costs; an attempt
of several calls records its least certain price."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jobstream import prices
from jobstream.server.app import create_app
from jobstream.settings import Settings
from jobstream.worker.providers.openai import estimate_tokens
from tests.support import user_jobs
from tests.support.fake_openai import FakeOpenAI, prompt_tokens
from tests.support.http_server import http_client, serve
from tests.support.openai_jobs import MAX_TOKENS, MODEL, PRICE, tenant_money
from tests.support.workers import attempt_rows, job_row, running_worker, wait_for_status

UNKNOWN = "not-in-any-catalogue-1"
DEFAULT = prices.load().default("openai")


@asynccontextmanager
async def api_of(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(settings, jobs=user_jobs.app)) as url,
        http_client(url, timeout=30) as client,
    ):
        yield client


async def create(api: httpx.AsyncClient, body: dict[str, Any]) -> uuid.UUID:
    response = await api.post("/api/jobs", json=body)
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


def prompt_job(prompt: str, **fields: Any) -> dict[str, Any]:
    return {"prompt": prompt, "provider": "openai", "max_tokens": MAX_TOKENS, **fields}


async def test_a_model_the_catalogue_does_not_know_costs_the_default_and_its_attempt_says_so(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI
) -> None:
    assert prices.load().price_of("openai", UNKNOWN) == DEFAULT != PRICE
    prompt = "what does an unknown model cost"
    async with api_of(ai_settings) as api:
        unknown = await create(api, prompt_job(prompt, model=UNKNOWN))
        known = await create(api, prompt_job(prompt))  # the settings' model, in the catalogue
        async with running_worker(ai_settings, pool=pool):
            for job_id in (unknown, known):
                await wait_for_status(pool, job_id, "succeeded")
        shown = (await api.get(f"/api/jobs/{unknown}")).json()["attempt_history"]
    # The two run at once: the fake may hear them in either order.
    assert sorted(r.model for r in fake.stats().records) == sorted([UNKNOWN, MODEL])
    for job_id, price, source in ((unknown, DEFAULT, "default"), (known, PRICE, "catalogue")):
        job = await job_row(pool, job_id)
        # The server reserved the estimate at that price, the worker recorded the call at it.
        assert job["estimate_usd"] == price.cost(estimate_tokens(prompt), MAX_TOKENS)
        (attempt,) = await attempt_rows(pool, job_id)
        assert attempt["price_source"] == source
        assert attempt["cost_usd"] == price.cost(prompt_tokens(prompt), MAX_TOKENS)
        assert attempt["cost_usd"] == job["charged_usd"]
    # The API's attempt view says so too.
    assert [(a["model"], a["price_source"]) for a in shown] == [(UNKNOWN, "default")]


async def test_an_operators_price_file_changes_what_a_real_job_reserves_and_costs(
    pool: asyncpg.Pool, ai_settings: Settings, fake: FakeOpenAI, tmp_path: Path
) -> None:
    prices_file = tmp_path / "prices.toml"
    prices_file.write_text(f'[openai.models]\n"{MODEL}" = {{ input = 3, output = 7 }}\n')
    settings = ai_settings.replace(prices_file=str(prices_file))
    operator = settings.prices.price_of("openai", MODEL)
    assert operator.source == "operator"
    prompt = "what does the operator's price make of a job"
    tokens = prompt_tokens(prompt)
    assert operator.cost(tokens, MAX_TOKENS) != PRICE.cost(tokens, MAX_TOKENS)
    async with api_of(settings) as api:
        job_id = await create(api, prompt_job(prompt))
        async with running_worker(settings, pool=pool):
            job = await wait_for_status(pool, job_id, "succeeded")
    assert job["estimate_usd"] == operator.cost(estimate_tokens(prompt), MAX_TOKENS)
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["price_source"], attempt["cost_usd"]) == (
        "operator",
        operator.cost(tokens, MAX_TOKENS),
    )
    assert job["charged_usd"] == attempt["cost_usd"]
    assert await tenant_money(pool) == (Decimal(0), job["charged_usd"])


async def test_an_attempt_of_several_calls_records_default_if_any_call_was_priced_by_it(
    pool: asyncpg.Pool, ai_settings: Settings, api: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    listed = await create(api, {"job": "ask_models", "input": {"models": [MODEL, MODEL]}})
    mixed = await create(api, {"job": "ask_models", "input": {"models": [MODEL, UNKNOWN]}})
    async with running_worker(ai_settings, pool=pool, app=user_jobs.app):
        for job_id in (listed, mixed):
            await wait_for_status(pool, job_id, "succeeded")
    cost = {
        model: price.cost(prompt_tokens(f"ask {model}"), 4)
        for model, price in ((MODEL, PRICE), (UNKNOWN, DEFAULT))
    }
    (first,) = await attempt_rows(pool, listed)
    assert (first["price_source"], first["cost_usd"]) == ("catalogue", 2 * cost[MODEL])
    (second,) = await attempt_rows(pool, mixed)
    assert (second["price_source"], second["cost_usd"]) == ("default", cost[MODEL] + cost[UNKNOWN])
    # The job names no model; its attempts' rows name those its calls went to, for spend by model.
    assert (first["model"], second["model"]) == (MODEL, ", ".join(sorted([MODEL, UNKNOWN])))
