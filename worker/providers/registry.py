"""Providers by name: the one place that knows every concrete provider the worker can run."""

from __future__ import annotations

from collections.abc import Mapping

from jobstream.settings import Settings
from jobstream.worker.providers.anthropic import AnthropicProvider
from jobstream.worker.providers.base import Provider
from jobstream.worker.providers.openai import OpenAIProvider
from jobstream.worker.providers.simulated import SIMULATED_MODEL, SimulatedProvider


def build_providers(settings: Settings) -> dict[str, Provider]:
    """Every provider this worker runs, by the name jobs use in their `provider` field.

    Without the simulator (JOBSTREAM_SIMULATED=false), a worker leaves simulated jobs queued
    for a worker that runs it, and the server refuses to create them.
    """
    providers: dict[str, Provider] = {
        "openai": OpenAIProvider(settings),
        "anthropic": AnthropicProvider(settings),
    }
    if settings.simulated:
        price = settings.prices.price_of("simulated", SIMULATED_MODEL)
        providers["simulated"] = SimulatedProvider(price=price)
    return providers


def prepare_providers(providers: Mapping[str, Provider]) -> None:
    """Make ready what providers make at their first request (an SDK's import, its client),
    for those that can: a worker does so before it claims. The server never calls it: it builds
    providers only to price jobs."""
    for provider in providers.values():
        prepare = getattr(provider, "prepare", None)
        if prepare is not None:
            prepare()


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Release what providers hold (an HTTP client's connections), for those that hold any."""
    for provider in providers.values():
        aclose = getattr(provider, "aclose", None)
        if aclose is not None:
            await aclose()
