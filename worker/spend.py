"""What an attempt's provider calls used and cost: the sum its outcome records.

An attempt makes one call (the built-in job) or many (a job's `ctx.llm` calls, in turn or at
once). A finished call counts what its provider reported, or our estimate when it reported
nothing; a call still open when the attempt ends counts what it reported so far, a known zero
when it was refused before any output, or our estimate of what it produced (docs/design.md,
"Money: the ledger").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal

from jobstream.usage import Usage, summed
from jobstream.worker.providers.base import Provider, ProviderRequest

_ZERO = Usage(cost_usd=Decimal(0), cost_known=True)


@dataclass(eq=False)
class Call:
    """One provider call of the attempt."""

    provider: Provider
    request: ProviderRequest
    deltas: int = 0  # text deltas received: our count of its output tokens
    usage: Usage | None = None  # the provider's own, once it sent it

    def estimate(self) -> Usage:
        return Usage(
            output_tokens=self.deltas,
            cost_usd=self.provider.estimate_cost(self.request, self.deltas),
            cost_known=False,
        )

    def priced(self, usage: Usage) -> Usage:
        """`usage` with how its price was found: the catalogue's answer for this call's model,
        which its cost (the provider's, or our estimate) was computed with."""
        price = self.provider.price(self.request)
        return replace(usage, price_source=price.source, model=self.request.model or price.model)

    def refused(self) -> Usage:
        """Refused before any output: billed nothing, so no price was used; the model was
        still asked."""
        return replace(_ZERO, model=self.request.model or self.provider.price(self.request).model)


@dataclass
class Spend:
    finished: list[Usage] = field(default_factory=list)
    open: list[Call] = field(default_factory=list)
    # What the journaled steps this attempt replayed cost when they ran (worker/steps.py): not
    # this attempt's cost, but part of what its result is charged.
    replayed_usd: Decimal = Decimal(0)

    def begin(self, provider: Provider, request: ProviderRequest) -> Call:
        call = Call(provider, request)
        self.open.append(call)
        return call

    def end(self, call: Call) -> Usage:
        """The call's stream ended whole; what it used."""
        self.open.remove(call)
        usage = call.priced(call.usage or call.estimate())
        self.finished.append(usage)
        return usage

    @property
    def request_sent(self) -> bool:
        """A call is open whose request went out: the provider may be working on it."""
        return any(call.request.send_mark.sent for call in self.open)

    def total(self, *, refused_call_billed_nothing: bool = False) -> Usage:
        """The attempt's usage so far. With `refused_call_billed_nothing` (the attempt failed
        with an error the provider answered before doing any work), an open call that produced
        nothing counts as a known zero instead of an estimate."""
        parts = list(self.finished)
        for call in self.open:
            if call.usage is not None:
                parts.append(call.priced(call.usage))
            elif refused_call_billed_nothing and call.deltas == 0:
                parts.append(call.refused())
            else:
                parts.append(call.priced(call.estimate()))
        return summed(parts)

    def committed_usd(self) -> Decimal:
        """The most the attempt's calls can have cost once the open ones end: the finished
        ones' cost, and each open one's reported cost or its price at its token limit."""
        cost = sum((usage.cost_usd for usage in self.finished), Decimal(0))
        for call in self.open:
            if call.usage is not None:
                cost += call.usage.cost_usd
            else:
                cost += call.provider.estimate_cost(call.request, call.request.max_tokens)
        return cost
