"""The attempt's own timeout: before the request went out it is transient (retried, costs
nothing); after, the outcome is unknown (docs/design.md, "Errors and retries")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal

import asyncpg

from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem
from tests.support.gated_provider import SIMULATED_PRICE
from tests.support.workers import attempt_rows, create_job, running_worker, wait_for_status


class HangingProvider:
    """Hangs forever, either still connecting (never sent) or after sending the request."""

    name = "simulated"

    def __init__(self, *, sends: bool) -> None:
        self._sends = sends

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        if self._sends:
            request.send_mark.mark()
        never: asyncio.Future[StreamItem] = asyncio.get_running_loop().create_future()
        yield await never

    def price(self, request: Prompt) -> Price:
        return SIMULATED_PRICE

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return Decimal("0.01")


async def test_a_timeout_before_the_request_was_sent_is_retried_and_costs_nothing(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_id = await create_job(pool, timeout_s=0.2, max_attempts=2)
    provider = HangingProvider(sends=False)
    async with running_worker(settings, pool=pool, providers={"simulated": provider}):
        job = await wait_for_status(pool, job_id, "dead")
    assert job["error"]["class"] == "timeout"
    rows = await attempt_rows(pool, job_id)
    assert [(a["outcome"], a["error_class"]) for a in rows] == [("failed", "timeout")] * 2
    assert all(a["cost_usd"] == 0 and a["cost_known"] for a in rows)


async def test_a_timeout_after_the_request_was_sent_is_an_unknown_outcome(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_id = await create_job(pool, timeout_s=0.2, max_attempts=2)
    provider = HangingProvider(sends=True)
    async with running_worker(settings, pool=pool, providers={"simulated": provider}):
        job = await wait_for_status(pool, job_id, "failed")
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["outcome"], attempt["error_class"]) == ("unknown", "timeout")
    assert attempt["cost_known"] is False
    assert job["error"]["class"] == "timeout"
