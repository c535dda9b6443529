"""What this server lets a job ask of the simulated provider.

The simulator is free and does what the job says, so unchecked it let one tenant hold every
worker slot for an hour (`first_token_delay_s` and `timeout_s` at 3,600), pause the provider for
every tenant (a `rate_limited` fault's `retry_after_s`), and set its own price. Here: it can be
switched off (production), an attempt it runs is bounded in time, and its price is the server's.

And a provider that cannot run without a key (`anthropic`) is refused where its key is unset,
naming the setting, rather than queued to fail at every attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobstream.jobspec import DEFAULT_TIMEOUT_S
from jobstream.settings import Settings
from jobstream.worker.providers.simulated import (
    DEFAULT_FIRST_TOKEN_DELAY_S,
    DEFAULT_TOKENS_PER_SECOND,
    InvalidSimulation,
    Simulation,
    run_seconds,
)

OFF = "the simulated provider is switched off on this server"
ANTHROPIC_KEY = "JOBSTREAM_ANTHROPIC_API_KEY"


@dataclass(frozen=True)
class SimulatedRules:
    enabled: bool  # JOBSTREAM_SIMULATED
    max_s: float  # JOBSTREAM_SIMULATED_MAX_S
    # (provider, setting) for each provider whose key this server lacks.
    missing_keys: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> SimulatedRules:
        missing = () if settings.anthropic_api_key else (("anthropic", ANTHROPIC_KEY),)
        return cls(enabled=settings.simulated, max_s=settings.simulated_max_s, missing_keys=missing)

    def key_refusal(self, provider: str) -> str | None:
        """Why a job for `provider` cannot be created here: its key is unset."""
        for name, setting in self.missing_keys:
            if name == provider:
                return f"{name} needs {setting}, which this server does not set"
        return None

    def refusals(
        self, *, provider: str, simulate: Mapping[str, Any], max_tokens: int, timeout_s: float
    ) -> list[tuple[str, str]]:
        """(field, message) for each rule the job breaks; none when it may be created."""
        found: list[tuple[str, str]] = []
        unkeyed = self.key_refusal(provider)
        if unkeyed is not None:
            found.append(("provider", unkeyed))
        if "cost_per_token" in simulate:
            # Refused rather than ignored: a client that thinks it set the price learns it did not.
            found.append(("simulate.cost_per_token", "is the server's price, not the job's"))
        if not self.enabled:
            if provider == "simulated":
                found.append(("provider", OFF))
            if simulate:
                found.append(("simulate", f"is not accepted: {OFF}"))
            return found
        if provider != "simulated":
            return found  # another provider ignores `simulate`
        try:
            sim = Simulation.parse(simulate, max_tokens)
        except InvalidSimulation:
            return found  # a malformed `simulate` is reported field by field already
        return found + self._time_refusals(sim, timeout_s)

    def allows_plain(self, *, provider: str, simulate: Mapping[str, Any], max_tokens: int) -> bool:
        """Whether refusals() is empty, for a `simulate` of the plain fields only, each a number
        in bounds (server/job_body.py, _plain_simulate): the same rules, without parsing a
        Simulation, which was a third of the lean path's time (a batch checks 1,000 jobs).
        tests/unit/test_plain_spec.py holds the two paths to the same answers."""
        if self.missing_keys and self.key_refusal(provider) is not None:
            return False
        if not self.enabled:
            return provider != "simulated" and not simulate
        if provider != "simulated":
            return True
        get = simulate.get
        delay = get("first_token_delay_s", DEFAULT_FIRST_TOKEN_DELAY_S)
        tokens = min(get("tokens", max_tokens), max_tokens)
        run_s = run_seconds(tokens, get("tokens_per_second", DEFAULT_TOKENS_PER_SECOND), delay)
        return delay <= self.max_s and run_s <= self.max_s

    def _time_refusals(self, sim: Simulation, timeout_s: float) -> list[tuple[str, str]]:
        cap = self.max_s
        found: list[tuple[str, str]] = []
        if sim.first_token_delay_s > cap:
            found.append(("simulate.first_token_delay_s", f"must be at most {cap:g} s here"))
        elif sim.run_s > cap:
            found.append((
                "simulate.tokens_per_second",
                f"{sim.tokens:,} tokens at {sim.tokens_per_second:g} a second take "
                f"{sim.run_s:,.0f} s; a simulated attempt may last at most {cap:g} s here",
            ))  # fmt: skip
        for i, fault in enumerate(sim.faults):
            if fault.kind == "rate_limited" and fault.retry_after_s > cap:
                found.append((
                    f"simulate.faults[{i}].retry_after_s",
                    f"must be at most {cap:g} s here: a 429 pauses the provider for every job",
                ))  # fmt: skip
        hangs = any(fault.kind == "timeout" for fault in sim.faults)
        if hangs and timeout_s > cap:
            found.append((
                "timeout_s",
                f"must be at most {cap:g} s here with a simulated `timeout` fault, which hangs "
                f"until it (the default is {DEFAULT_TIMEOUT_S:g} s: send a shorter timeout_s)",
            ))  # fmt: skip
        return found
