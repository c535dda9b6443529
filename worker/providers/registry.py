"""Providers by name: the one place that knows every concrete provider the worker can run."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import cast

from jobstream.settings import Settings
from worker.providers.base import Provider
from worker.providers.simulated import SimulatedProvider

# Written in parallel by another change; registered when present so that this module never
# has to change when it lands.
OPENAI_MODULE = "worker.providers.openai"


def build_providers(settings: Settings) -> dict[str, Provider]:
    """Every provider this worker runs, by the name jobs use in their `provider` field."""
    providers: dict[str, Provider] = {"simulated": SimulatedProvider()}
    openai = _openai(settings)
    if openai is not None:
        providers["openai"] = openai
    return providers


def _openai(settings: Settings) -> Provider | None:
    if importlib.util.find_spec(OPENAI_MODULE) is None:
        return None
    # Imported by name: the module may not exist yet when this one is type-checked. An import
    # error inside it is a bug and is raised, not hidden.
    module = importlib.import_module(OPENAI_MODULE)
    return cast(Provider, module.OpenAIProvider(settings))


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Release what providers hold (an HTTP client's connections), for those that hold any."""
    for provider in providers.values():
        aclose = getattr(provider, "aclose", None)
        if aclose is not None:
            await aclose()
