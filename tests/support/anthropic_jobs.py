"""Jobs for the `anthropic` provider against tests/support/fake_anthropic.py, and their prices."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream import creates, prices
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.worker.providers.anthropic import AnthropicProvider
from jobstream.worker.providers.base import ProviderRequest

KEY = "sk-ant-jobstream-test-7d1a54127b222502f5b79b5fb0803061"
# The jobs' model: one of the price catalogue's (jobstream/prices.toml), not priced at the
# provider's default. Its prices times whole token counts, the cache's included, fit
# numeric(18, 8) exactly, so sums reconcile to the last digit.
MODEL = "claude-haiku-4-5"
PRICE = prices.load().price_of("anthropic", MODEL)
assert PRICE.source == "catalogue" and prices.load().default("anthropic") != PRICE
assert all(
    amount / 1_000_000 == (amount / 1_000_000).quantize(Decimal("1e-8"))
    for amount in (PRICE.input, PRICE.output, PRICE.cache_read, PRICE.cache_write)
), f"{MODEL}'s prices no longer fit numeric(18, 8) per token: pick another model"
MAX_TOKENS = 8


def anthropic_settings(settings: Settings, base_url: str, **changes: Any) -> Settings:
    """`settings` pointed at the fake, with short provider timeouts."""
    return settings.replace(
        anthropic_base_url=base_url,
        anthropic_api_key=KEY,
        anthropic_model=MODEL,
        anthropic_connect_timeout_s=2.0,
        anthropic_first_token_timeout_s=2.0,
        anthropic_idle_timeout_s=0.4,
        **changes,
    )


def price(
    input_tokens: int, output_tokens: int, *, cache_write: int = 0, cache_read: int = 0
) -> Decimal:
    """The catalogue's price of a call of MODEL: `input_tokens` uncached, the cache's tokens at
    their own prices."""
    return PRICE.cost(input_tokens, output_tokens, cache_read, cache_write)


async def create_anthropic_job(
    pool: asyncpg.Pool, settings: Settings, prompt: str, **fields: Any
) -> uuid.UUID:
    """Create a job as the server does: its estimated maximum price reserved from the budget."""
    spec = JobSpec(prompt=prompt, provider="anthropic", max_tokens=MAX_TOKENS, **fields)
    request = ProviderRequest(prompt=prompt, model=None, max_tokens=spec.max_tokens, attempt=1)
    reservation = AnthropicProvider(settings).estimate_cost(request, spec.max_tokens)
    created = await creates.create(
        pool, "default", spec, str(uuid.uuid4()), reserved_usd=reservation
    )
    job_id: uuid.UUID = created.job.id
    return job_id
