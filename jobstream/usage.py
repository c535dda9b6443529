"""Token usage and provider cost of one attempt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jobstream.prices import PriceSource, least_certain


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
    # The model the calls went to (the one asked for, else the provider's default); when an
    # attempt called several, their names sorted and joined by ", " (one label per set, so
    # spend by model groups them alike). The attempt's row records it: spend can be told by
    # model for a job of the user's own code too, whose request names none. None: no call was
    # priced. Not in the result's JSON.
    model: str | None = None

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


def summed(parts: Sequence[Usage]) -> Usage:
    """The usage of several calls (an attempt's, a step's) as one; of none, a known zero."""
    if len(parts) == 1:
        return parts[0]
    models = {name for part in parts for name in (part.model or "").split(", ") if name}
    return Usage(
        input_tokens=sum(p.input_tokens for p in parts),
        output_tokens=sum(p.output_tokens for p in parts),
        cost_usd=sum((p.cost_usd for p in parts), Decimal(0)),
        cost_known=all(p.cost_known for p in parts),
        cache_read_tokens=sum(p.cache_read_tokens for p in parts),
        cache_write_tokens=sum(p.cache_write_tokens for p in parts),
        price_source=least_certain(p.price_source for p in parts),
        model=", ".join(sorted(models)) or None,
    )
