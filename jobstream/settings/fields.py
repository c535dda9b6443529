"""A setting: a dataclass field that names its environment variable, documents itself and may
have a floor."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import field
from typing import Any


class SettingsError(ValueError):
    """A configuration value is missing or malformed."""


def setting(
    env: str, default: Any, doc: str, *, minimum: float | None = None, secret: bool = False
) -> Any:
    # Secrets stay out of repr(), so a logged or printed Settings never shows them.
    return field(
        default=default,
        repr=not secret,
        metadata={"env": env, "doc": doc, "minimum": minimum},
    )


def one_of(value: str, allowed: tuple[str, ...]) -> str:
    """Why `value` is refused, naming the nearest allowed name when one is close."""
    nearest = difflib.get_close_matches(value, allowed, n=1, cutoff=0.5)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return f"must be one of {', '.join(allowed)}{hint}"


def not_above(settings: Any, low: str, high: str) -> list[str]:
    """The problem, naming both variables, when field `low` of `settings` exceeds field `high`."""
    if getattr(settings, low) <= getattr(settings, high):
        return []
    env = {f.name: f.metadata["env"] for f in dataclasses.fields(settings)}
    return [f"{env[low]} must not exceed {env[high]}"]
