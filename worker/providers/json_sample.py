"""A JSON value that fits a JSON Schema, deterministic for a seed: the simulated provider's
structured answers (`ctx.llm.parse` with no model behind it).

It reads the schemas pydantic writes: objects with properties (every property, required or
not), arrays, strings (with their length bounds, enums and a few formats; not `pattern`),
numbers and integers (with their bounds, exclusive ones too), booleans, null, `const`,
`anyOf`/`oneOf` (the first that is not null) and `$ref` into `$defs`.
"""

from __future__ import annotations

import random
from typing import Any

_WORDS = (
    "lease", "fence", "token", "stream", "attempt", "ledger", "journal", "replay", "cursor",
    "retry", "budget", "durable", "worker", "queue", "result", "schema", "summary", "risk",
)  # fmt: skip
_FORMATS = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-7000-8000-000000000000",
}


def sample(schema: dict[str, Any], seed: int) -> Any:
    return _Sampler(schema, random.Random(seed)).value(schema, depth=0)


class _Sampler:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self._defs: dict[str, Any] = root.get("$defs", {})
        self._rng = rng

    def value(self, schema: dict[str, Any], depth: int) -> Any:
        if "$ref" in schema:
            return self.value(self._defs[schema["$ref"].rsplit("/", 1)[-1]], depth)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self._rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
                return self.value(options[0], depth)
        kind = schema.get("type", "object")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        match kind:
            case "object":
                properties = schema.get("properties", {})
                return {name: self.value(sub, depth + 1) for name, sub in properties.items()}
            case "array":
                low = schema.get("minItems", 1)
                high = max(low, min(schema.get("maxItems", 3), 3 if depth < 4 else low))
                return [self.value(schema.get("items", {}), depth + 1) for _ in range(high)]
            case "string":
                return self._string(schema)
            case "integer":
                low = int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1))
                high = int(schema.get("maximum", schema.get("exclusiveMaximum", 101) - 1))
                return self._rng.randint(low, max(low, high))
            case "number":
                low, high = _bounds(schema)
                return round(self._rng.uniform(low, max(low, high)), 3)
            case "boolean":
                return self._rng.random() < 0.5
            case _:
                return None

    def _string(self, schema: dict[str, Any]) -> str:
        if schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        low, high = schema.get("minLength", 0), schema.get("maxLength", 80)
        words: list[str] = []
        while len(" ".join(words)) < max(low, min(high, 24)):
            words.append(self._rng.choice(_WORDS))
        text = " ".join(words)
        return text[:high] if len(text) > high else text.ljust(low, "x")


def _bounds(schema: dict[str, Any]) -> tuple[float, float]:
    """A number's range, strictly inside exclusive bounds (pydantic's gt and lt)."""
    low = float(schema.get("minimum", 0))
    high = float(schema.get("maximum", 1))
    if "exclusiveMinimum" in schema:
        low = float(schema["exclusiveMinimum"])
        high = max(high, low + 1)
        low += (high - low) / 1000
    if "exclusiveMaximum" in schema:
        high = float(schema["exclusiveMaximum"])
        high -= (high - low) / 1000
    return low, high
