"""Jobs for the `openai` provider against the fake server, and the money they move.

Shared by the worker tests, the multi-process tests and bench/bench_failure_costs.py, so that
they price and reconcile the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, NamedTuple

import asyncpg

from jobstream import creates, prices
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.worker.providers.base import ProviderRequest
from jobstream.worker.providers.openai import OpenAIProvider
from tests.support.fake_openai import RequestRecord

KEY = "sk-jobstream-worker-test-2c26b46b68ffc68ff99b453c1d304134"
# The jobs' model: one of the price catalogue's (jobstream/prices.toml), priced as production
# prices it, and not at the provider's default (a model found nowhere would cost the same). Its
# prices times whole token counts fit numeric(18, 8) exactly, so sums reconcile to the last digit.
MODEL = "gpt-4.1"
PRICE = prices.load().price_of("openai", MODEL)
assert PRICE.source == "catalogue" and prices.load().default("openai") != PRICE
assert all(
    amount / 1_000_000 == (amount / 1_000_000).quantize(Decimal("1e-8"))
    for amount in (PRICE.input, PRICE.output, PRICE.cache_read)
), f"{MODEL}'s prices no longer fit numeric(18, 8) per token: pick another model"
MAX_TOKENS = 8


def openai_settings(settings: Settings, base_url: str, **changes: Any) -> Settings:
    """`settings` pointed at the fake, with short provider timeouts."""
    return settings.replace(
        openai_base_url=base_url,
        openai_api_key=KEY,
        openai_model=MODEL,
        openai_connect_timeout_s=2.0,
        openai_first_token_timeout_s=2.0,
        openai_idle_timeout_s=0.4,
        **changes,
    )


def price(input_tokens: int, output_tokens: int) -> Decimal:
    """What a call of MODEL costs, by the catalogue."""
    return PRICE.cost(input_tokens, output_tokens)


def billed_usd(records: Iterable[RequestRecord]) -> Decimal:
    """What the fake's requests would cost at our prices: what the provider would bill."""
    return sum((price(r.billed_prompt_tokens, r.tokens_sent) for r in records), start=Decimal(0))


async def create_openai_job(
    pool: asyncpg.Pool, settings: Settings, prompt: str, **fields: Any
) -> uuid.UUID:
    """Create a job as the server does: its estimated maximum price reserved from the budget."""
    spec = JobSpec(prompt=prompt, provider="openai", max_tokens=MAX_TOKENS, **fields)
    request = ProviderRequest(prompt=prompt, model=None, max_tokens=spec.max_tokens, attempt=1)
    async with OpenAIProvider(settings) as provider:
        reservation = provider.estimate_cost(request, spec.max_tokens)
    created = await creates.create(
        pool, "default", spec, str(uuid.uuid4()), reserved_usd=reservation
    )
    job_id: uuid.UUID = created.job.id
    return job_id


class TenantMoney(NamedTuple):
    reserved: Decimal
    spent: Decimal


async def tenant_money(pool: asyncpg.Pool, tenant_id: str = "default") -> TenantMoney:
    row = await pool.fetchrow(
        "SELECT reserved_usd, spent_usd FROM tenant_balances WHERE tenant_id = $1", tenant_id
    )
    assert row is not None
    return TenantMoney(row["reserved_usd"], row["spent_usd"])
