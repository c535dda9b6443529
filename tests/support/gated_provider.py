"""A provider whose pace the test controls: some tokens, then a wait for the test's go-ahead.

It stands in for the LLM (never for the database), so that a test can hold an attempt in the
middle of its stream exactly as long as it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal

from jobstream import prices
from jobstream.prices import Price
from jobstream.usage import Usage
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem, TextDelta

# What the stand-ins for the simulator answer for their price: the catalogue's simulator's.
SIMULATED_PRICE = prices.load().price_of("simulated", "simulated")


class GatedProvider:
    name = "simulated"

    def __init__(self, *, before: int, after: int = 0, ends: bool = True) -> None:
        self._before = before
        self._after = after
        # False: after its tokens the stream hangs, like a provider that stopped answering.
        self._ends = ends
        self.waiting = asyncio.Event()  # the first `before` tokens are out; held at the gate
        self.gate = asyncio.Event()  # set it to let the rest of the stream through
        self.cancelled = asyncio.Event()  # the consumer cancelled the stream

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        try:
            for i in range(self._before):
                yield TextDelta(f"{i} ")
            self.waiting.set()
            await self.gate.wait()
            for i in range(self._before, self._before + self._after):
                yield TextDelta(f"{i} ")
            if not self._ends:
                await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        total = self._before + self._after
        yield Usage(
            input_tokens=1, output_tokens=total, cost_usd=self.estimate_cost(request, total)
        )

    def price(self, request: Prompt) -> Price:
        return SIMULATED_PRICE

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return Decimal("0.001") * output_tokens
