"""How the fake answers a request: the `Reply` a test queues or a prompt's marker spells."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

ReplyKind = Literal["ok", "error", "malformed", "hang", "disconnect", "stream_error"]
# Kinds that break a stream after `after_tokens` tokens.
STREAM_FAULTS: Final = frozenset({"malformed", "hang", "disconnect", "stream_error"})

DEFAULT_TOKENS: Final = 16
MARKER: Final = re.compile(r"\[\[fake:([^\]]*)\]\]")


@dataclass(frozen=True)
class Reply:
    """How the fake answers one request."""

    kind: ReplyKind = "ok"
    status: int = 500  # kind="error": the HTTP status; kind="stream_error": the error's code
    retry_after: str | None = None  # Retry-After header, verbatim (seconds or an HTTP date)
    retry_after_ms: str | None = None  # retry-after-ms header, verbatim
    tokens: int | None = None  # completion tokens; None: min(max_tokens, DEFAULT_TOKENS)
    after_tokens: int = 0  # stream faults: tokens sent before the fault
    first_token_delay_s: float = 0.0  # after the headers, before the first chunk
    token_delay_s: float = 0.0  # between tokens
    usage: bool = True  # send the usage chunk (when the request asks for it)
    # Of the prompt's tokens, how many the usage chunk says were read from the prompt cache
    # (`prompt_tokens_details.cached_tokens`, as OpenAI reports them); 0 sends no details.
    cached_tokens: int = 0
    comments: bool = False  # an SSE comment line before every chunk, as some proxies send
    # Script: how many requests this reply serves (None: 1). Marker: the first N requests with
    # this prompt misbehave, later ones get a normal stream (None: all of them).
    times: int | None = None
    # The answer's exact text (in tokens of four characters) instead of the prompt's words, and
    # a finish reason instead of stop/length; a refusal is sent as refusal deltas instead.
    content: str | None = None
    finish_reason: str | None = None
    refusal: str | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> Reply:
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if name not in known:
                raise ValueError(f"unknown reply field {name!r}")
            values[name] = _coerce(name, str(known[name].type), value)
        if values.get("kind", "ok") not in get_args(ReplyKind):
            raise ValueError(f"unknown reply kind {values['kind']!r}")
        return cls(**values)

    @classmethod
    def from_marker(cls, body: str) -> Reply:
        pairs = (part.partition("=") for part in body.split(";") if part.strip())
        return cls.from_mapping({key.strip(): value.strip() for key, _, value in pairs})

    def marker(self) -> str:
        """`[[fake:...]]` text that makes the fake answer a prompt containing it like this."""
        changed = {k: v for k, v in self.to_json().items() if v != _DEFAULT_JSON[k]}
        return "[[fake:" + ";".join(f"{k}={_marker_value(v)}" for k, v in changed.items()) + "]]"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_DEFAULT_JSON: Final = Reply().to_json()


def _marker_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _coerce(name: str, annotation: str, value: object) -> object:
    if value is None or (isinstance(value, str) and value.lower() in {"none", "null"}):
        if "None" in annotation:
            return None
        raise ValueError(f"{name} may not be null")
    base = annotation.split("|")[0].strip()
    if base == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text not in {"true", "false", "1", "0"}:
            raise ValueError(f"{name}: expected true or false, got {value!r}")
        return text in {"true", "1"}
    if base == "int":
        return int(str(value))
    if base == "float":
        return float(str(value))
    return str(value)
