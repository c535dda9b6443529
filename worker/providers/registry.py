"""Providers by name: the one place that knows every concrete provider the worker can run."""

from __future__ import annotations

from collections.abc import Mapping

from jobstream.settings import Settings
from worker.providers.base import Provider
from worker.providers.openai import OpenAIProvider
from worker.providers.simulated import SimulatedProvider


def build_providers(settings: Settings) -> dict[str, Provider]:
    """Every provider this worker runs, by the name jobs use in their `provider` field."""
    return {"simulated": SimulatedProvider(), "openai": OpenAIProvider(settings)}


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Release what providers hold (an HTTP client's connections), for those that hold any."""
    for provider in providers.values():
        aclose = getattr(provider, "aclose", None)
        if aclose is not None:
            await aclose()
