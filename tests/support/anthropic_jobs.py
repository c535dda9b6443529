"""Jobs for the `anthropic` provider against tests/support/fake_anthropic.py, and their prices."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream import creates
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.worker.providers.anthropic import AnthropicProvider
from jobstream.worker.providers.base import ProviderRequest

KEY = "sk-ant-jobstream-test-7d1a54127b222502f5b79b5fb0803061"
# Prices whose products with token counts, the cache's multiples included (1.25x and 0.1x),
# fit numeric(18, 8) exactly: 4e-6 USD an input token, 5e-6 a cache write, 4e-7 a cache read,
# 2e-5 an output token.
INPUT_USD_PER_MTOK = 4.0
OUTPUT_USD_PER_MTOK = 20.0
MAX_TOKENS = 8


def anthropic_settings(settings: Settings, base_url: str, **changes: Any) -> Settings:
    """`settings` pointed at the fake, with short provider timeouts."""
    return settings.replace(
        anthropic_base_url=base_url,
        anthropic_api_key=KEY,
        anthropic_model="claude-test-model",
        anthropic_connect_timeout_s=2.0,
        anthropic_first_token_timeout_s=2.0,
        anthropic_idle_timeout_s=0.4,
        anthropic_input_usd_per_mtok=INPUT_USD_PER_MTOK,
        anthropic_output_usd_per_mtok=OUTPUT_USD_PER_MTOK,
        **changes,
    )


def price(
    input_tokens: int, output_tokens: int, *, cache_write: int = 0, cache_read: int = 0
) -> Decimal:
    """The price of a call: `input_tokens` uncached, cache writes 1.25x, reads 0.1x."""
    per_million = (
        input_tokens * Decimal(str(INPUT_USD_PER_MTOK))
        + cache_write * Decimal(str(INPUT_USD_PER_MTOK)) * Decimal("1.25")
        + cache_read * Decimal(str(INPUT_USD_PER_MTOK)) * Decimal("0.1")
        + output_tokens * Decimal(str(OUTPUT_USD_PER_MTOK))
    )
    return per_million / Decimal(1_000_000)


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
