"""Reading settings from the environment: each value parsed by its field's type and checked
against its floor, every bad value reported at once; and the JOBSTREAM_* names no setting reads."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any

# JOBSTREAM_* variables read by something other than the server and worker (the CLI, the tests),
# so that no warning calls them unknown.
OTHER_NAMES = frozenset(
    {"JOBSTREAM_URL", "JOBSTREAM_API_KEY", "JOBSTREAM_FUZZ_API_KEY", "JOBSTREAM_FUZZ_SEED",
     "JOBSTREAM_TEST_SEED"}
)  # fmt: skip


def read_values(
    fields: tuple[dataclasses.Field[Any], ...], env: Mapping[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """The values `env` sets, by field name, and a problem for each one that is malformed."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields:
        name = f.metadata["env"]
        raw = env.get(name)
        if raw is None or (raw == "" and f.default is None):
            continue
        try:
            value = _parser_for(f.type)(raw)
        except ValueError as exc:
            problems.append(f"{name}={raw!r}: {exc}")
            continue
        minimum = f.metadata["minimum"]
        if minimum is not None and value < minimum:
            problems.append(f"{name}={raw!r}: must be at least {minimum}")
            continue
        values[f.name] = value
    return values, problems


def unknown_names(
    fields: tuple[dataclasses.Field[Any], ...], env: Mapping[str, str]
) -> dict[str, str]:
    """Each JOBSTREAM_* variable in `env` that no field reads, with a warning naming the nearest
    known name."""
    known = sorted({f.metadata["env"] for f in fields} | OTHER_NAMES)
    # Compared without the prefix that they all share, which would make any two alike.
    tails = {k.removeprefix("JOBSTREAM_"): k for k in known}
    warnings = {}
    for name in sorted(env):
        if name.startswith("JOBSTREAM_") and name not in known:
            tail = name.removeprefix("JOBSTREAM_")
            nearest = difflib.get_close_matches(tail, list(tails), n=1, cutoff=0.6)
            hint = f" (did you mean {tails[nearest[0]]}?)" if nearest else ""
            warnings[name] = f"{name} is not a setting{hint}; it is ignored"
    return warnings


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (true/false), got {raw!r}")


def _parser_for(annotation: Any) -> Callable[[str], Any]:
    text = str(annotation)
    if text.startswith("bool"):
        return _parse_bool
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    return str
