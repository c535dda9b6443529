"""Token usage and provider cost of one attempt."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jobstream.prices import PriceSource


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    # False when the provider never told us (an unknown outcome): cost_usd is then our estimate.
    cost_known: bool = True
    # Of input_tokens, those read from the provider's prompt cache and those written to it
    # (Anthropic prices them apart); shown only when a provider reported some.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # How cost_usd's price was found (jobstream/prices.py): the attempt's row records it, so a
    # cost priced by a provider's default is told apart. None: no call was priced.
    price_source: PriceSource | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": str(self.cost_usd),
            "cost_known": self.cost_known,
        }
        if self.cache_read_tokens or self.cache_write_tokens:
            data["cache_read_tokens"] = self.cache_read_tokens
            data["cache_write_tokens"] = self.cache_write_tokens
        return data
