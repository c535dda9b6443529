"""Provider failures sorted into the kinds the attempt runner acts on (docs/design.md).

Every way a provider call can fail, for every HTTP provider, is one row of `RULES`: where it
failed (an error answer, an error inside a 200 stream, or the connection), what it carried (a
status, an error type or code), and what follows (the kind, whether every worker pauses the
provider, whether Retry-After is read, whether the provider refused before any work). The first
row that matches wins. The entry points the providers call read the table and nothing else
decides a kind:

- an HTTP status answer (`from_status`): the server saw the request and refused it;
- a transport error (`from_transport`, `from_connection`): safe to retry only if the request
  never left us;
- a fault of the stream itself (`from_stream_fault`): timeouts, malformed or truncated streams;
- an error object sent inside a 200 stream (`from_error_object`), as OpenAI and vLLM do;
- an Anthropic error (`from_error_type`), by the body's `error.type` as well as its status:
  an answer with an error status, or an `error` event inside a 200 stream.

`request_sent` is True once we started writing the request: from then on the provider may have
started (and billed) the work, so a failure without an answer is an unknown outcome.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from fnmatch import fnmatchcase
from typing import Any, Final, Literal

import httpx
import httpx2

from jobstream.errors import ProviderError
from jobstream.types import ErrorKind

Where = Literal["answer", "stream", "transport"]


@dataclass(frozen=True)
class Rule:
    """One row of RULES: what a failure must match ("*" matches anything), and what follows."""

    # answer: an error status. stream: an error inside a 200 stream. transport: no answer at
    # all (a connection that failed, a timeout, a stream that broke or went quiet).
    where: Where
    provider: str  # "openai" (and every OpenAI-compatible server), "anthropic"
    status: str  # "429", "408 409 425", "5xx": the answer's status, or an in-stream error's code
    # A glob over the error's type or code: Anthropic's `error.type`, OpenAI's in-stream
    # `error.type` and `error.code`, a transport exception's class name.
    error_type: str
    kind: ErrorKind
    pause_provider: bool  # every worker backs off the provider, as after a 429
    retry_after: bool  # the answer's Retry-After / retry-after-ms is passed on
    refused: bool  # an error status: the provider produced, and bills, nothing
    sent: str = "*"  # transport: "yes" when any of the request had left us, "no" when none had

    @property
    def id(self) -> str:
        return " ".join((self.where, self.provider, self.status, self.error_type, self.sent))

    def matches(
        self, where: Where, provider: str, status: int | None, types: tuple[str, ...], sent: str
    ) -> bool:
        return (
            self.where == where
            and self.provider in ("*", provider)
            and (self.status == "*" or _status_matches(self.status, status))
            and (self.error_type == "*" or any(fnmatchcase(t, self.error_type) for t in types))
            and self.sent in ("*", sent)
        )


def _status_matches(pattern: str, status: int | None) -> bool:
    if status is None:
        return False
    return any(
        status // 100 == int(word[0]) if word.endswith("xx") else status == int(word)
        for word in pattern.split()
    )


_Y, _N = True, False  # the three columns on the right: pause_provider, retry_after, refused
# The first row a failure matches decides. Anthropic's types are from
# https://docs.claude.com/en/api/errors; its SDK raises an in-stream `error` event with the
# stream's own status, 200, so there only the type can tell.
RULES: Final[tuple[Rule, ...]] = (
    # An error status: the request reached the provider, which produced nothing (refused). Its
    # Retry-After is passed on whatever the kind (a 503 may carry one too).
    #    where     provider     status         error type or code       kind            (_Y/_N)
    # Anthropic's 529 is an overload whatever its body says (or when the body lost its type).
    Rule("answer", "anthropic", "529",         "*",                     "transient",    _Y, _Y, _Y),
    Rule("answer", "anthropic", "*",           "overloaded_error",      "transient",    _Y, _Y, _Y),
    Rule("answer", "anthropic", "*",           "rate_limit_error",      "rate_limited", _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "api_error",             "transient",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "timeout_error",         "transient",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "invalid_request_error", "permanent",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "authentication_error",  "permanent",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "billing_error",         "permanent",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "permission_error",      "permanent",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "not_found_error",       "permanent",    _N, _Y, _Y),
    Rule("answer", "anthropic", "*",           "request_too_large",     "permanent",    _N, _Y, _Y),
    # Any provider, and Anthropic's types the list above does not name, by the status alone.
    Rule("answer", "*",         "429",         "*",                     "rate_limited", _N, _Y, _Y),
    # 4xx answers a later try can succeed with: request timeout, conflict, too early.
    Rule("answer", "*",         "408 409 425", "*",                     "transient",    _N, _Y, _Y),
    Rule("answer", "*",         "5xx",         "*",                     "transient",    _N, _Y, _Y),
    # Validation, auth, not found, redirects we do not follow: a retry fails the same way.
    Rule("answer", "*",         "*",           "*",                     "permanent",    _N, _Y, _Y),
    # An error inside a 200 stream: the server said it failed, so the outcome is known (not
    # unknown); the work had begun and may be billed (not refused); the stream's headers say
    # nothing about the error inside it (no Retry-After).
    Rule("stream", "anthropic", "*",           "overloaded_error",      "transient",    _Y, _N, _N),
    Rule("stream", "anthropic", "*",           "rate_limit_error",      "rate_limited", _N, _N, _N),
    Rule("stream", "anthropic", "*",           "api_error",             "transient",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "timeout_error",         "transient",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "invalid_request_error", "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "authentication_error",  "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "billing_error",         "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "permission_error",      "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "not_found_error",       "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "request_too_large",     "permanent",    _N, _N, _N),
    Rule("stream", "anthropic", "*",           "*",                     "transient",    _N, _N, _N),
    # OpenAI and vLLM: an HTTP-like `code` decides as a status would, else a rate-limit type or
    # code (`rate_limit_exceeded`), else transient.
    Rule("stream", "openai",    "429",         "*",                     "rate_limited", _N, _N, _N),
    Rule("stream", "openai",    "408 409 425", "*",                     "transient",    _N, _N, _N),
    Rule("stream", "openai",    "5xx",         "*",                     "transient",    _N, _N, _N),
    Rule("stream", "openai",    "4xx",         "*",                     "permanent",    _N, _N, _N),
    Rule("stream", "openai",    "*",           "*rate_limit*",          "rate_limited", _N, _N, _N),
    Rule("stream", "openai",    "*",           "*",                     "transient",    _N, _N, _N),
    # No answer. A base URL without http(s):// is configuration, not weather; otherwise safe
    # to retry only if nothing of the request left us, else the provider may be working (and
    # billing): unknown.
    Rule("transport", "*", "*", "UnsupportedProtocol", "permanent", _N, _N, _N),
    Rule("transport", "*", "*", "*",                   "transient", _N, _N, _N, sent="no"),
    Rule("transport", "*", "*", "*",                   "unknown",   _N, _N, _N, sent="yes"),
)  # fmt: skip


def rule_for(
    where: Where,
    provider: str = "*",
    *,
    status: int | None = None,
    types: tuple[str, ...] = (),
    sent: bool | None = None,
) -> Rule:
    """The first row of RULES the failure matches (every `where` ends with rows that match
    whatever the failure carried)."""
    said = "*" if sent is None else "yes" if sent else "no"
    for rule in RULES:
        if rule.matches(where, provider, status, types, said):
            return rule
    raise LookupError(f"no classification rule for {where} {provider} {status} {types} {sent}")


# Transport errors raised before any byte of the request is written: connection refused, DNS,
# connect timeout, no free pooled connection, a URL we cannot send to (httpx's, and the SDKs'
# httpx2).
_BEFORE_SEND: Final = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.PoolTimeout,
    httpx2.UnsupportedProtocol,
)

StreamFault = Literal["first_token_timeout", "idle_timeout", "malformed_chunk", "ended_early"]

_FAULT_TEXT: Final[dict[StreamFault, str]] = {
    "first_token_timeout": "no first token before the first-token timeout",
    "idle_timeout": "stream went idle between chunks",
    "malformed_chunk": "malformed stream chunk",
    "ended_early": "stream ended before completion",
}


def parse_retry_after(
    headers: httpx.Headers | httpx2.Headers | Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """Seconds to wait, from `retry-after-ms` (OpenAI's precise form) or `Retry-After`
    (delta-seconds or an HTTP date). None when absent or unreadable; never negative."""
    known = isinstance(headers, httpx.Headers | httpx2.Headers)
    lookup = headers if known else httpx.Headers(headers)
    millis = _finite_float(lookup.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    raw = lookup.get("retry-after")
    if raw is None:
        return None
    seconds = _finite_float(raw)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def from_status(
    status_code: int,
    headers: httpx.Headers | httpx2.Headers | Mapping[str, str],
    *,
    detail: str = "",
    now: datetime | None = None,
) -> ProviderError:
    """An error answer of an OpenAI-compatible server, by its status."""
    message = f"provider answered HTTP {status_code}"
    if detail:
        message = f"{message}: {detail}"
    rule = rule_for("answer", "openai", status=status_code)
    return _error(rule, message, headers, now, status_code=status_code, request_sent=True)


def from_transport(
    exc: httpx.TransportError | httpx2.TransportError, *, request_sent: bool | None = None
) -> ProviderError:
    """A transport failure. `request_sent` comes from the connection trace when known; without
    it the exception type decides (connect-phase errors happen before anything is sent)."""
    sent = not isinstance(exc, _BEFORE_SEND) if request_sent is None else request_sent
    description = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _connection(description, sent, types=(type(exc).__name__,))


def from_connection(description: str, *, request_sent: bool) -> ProviderError:
    """A connection that failed without an answer, described; `request_sent` as known."""
    return _connection(description, request_sent)


def from_stream_fault(
    fault: StreamFault, *, request_sent: bool = True, detail: str = ""
) -> ProviderError:
    """A failure we detect ourselves. Once the request is out, the provider may still be working
    (and billing): unknown. A first-token timeout that fires while still connecting is not."""
    message = _FAULT_TEXT[fault]
    if detail:
        message = f"{message}: {detail}"
    rule = rule_for("transport", sent=request_sent)
    if not request_sent:
        message = f"request not sent: {message}"
    return _error(rule, message, {}, None, request_sent=request_sent)


def from_error_object(payload: Mapping[str, Any]) -> ProviderError:
    """An error an OpenAI-compatible server reported inside a 200 stream, either
    `{"error": {...}}` (OpenAI, current vLLM) or a top-level `{"object": "error", ...}` (older
    vLLM)."""
    inner = payload.get("error")
    body: Mapping[str, Any] = inner if isinstance(inner, Mapping) else payload
    message = body.get("message")
    text = message if isinstance(message, str) and message else "error inside the stream"
    code = body.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    in_range = status if status is not None and 400 <= status <= 599 else None
    types = tuple(str(value) for value in (body.get("type"), code) if value is not None)
    rule = rule_for("stream", "openai", status=in_range, types=types)
    return _error(
        rule, f"provider reported an error mid-stream: {text}", {}, None, status_code=status
    )


def from_error_type(
    status_code: int,
    error_type: str | None,
    headers: httpx.Headers | httpx2.Headers | Mapping[str, str],
    *,
    detail: str = "",
    in_stream: bool = False,
    now: datetime | None = None,
) -> ProviderError:
    """An Anthropic error: an answer with an error status, or (`in_stream`) an `error` event
    after a 200. The type decides where it is known, else the status."""
    where: Where = "stream" if in_stream else "answer"
    types = (error_type,) if error_type else ()
    rule = rule_for(where, "anthropic", status=None if in_stream else status_code, types=types)
    said = "mid-stream" if in_stream else f"HTTP {status_code}"
    message = f"provider answered {said}: {error_type or 'error'}"
    if detail:
        message = f"{message}: {detail}"
    return _error(rule, message, headers, now, status_code=None if in_stream else status_code)


def _connection(description: str, sent: bool, *, types: tuple[str, ...] = ()) -> ProviderError:
    rule = rule_for("transport", types=types, sent=sent)
    if rule.kind == "permanent":
        message = f"bad provider URL: {description}"
    elif sent:
        message = f"no complete answer after the request was sent: {description}"
    else:
        message = f"request not sent: {description}"
    return _error(rule, message, {}, None, request_sent=sent)


def _error(
    rule: Rule,
    message: str,
    headers: httpx.Headers | httpx2.Headers | Mapping[str, str],
    now: datetime | None,
    *,
    status_code: int | None = None,
    request_sent: bool = True,
) -> ProviderError:
    return ProviderError(
        rule.kind,
        message,
        retry_after_s=parse_retry_after(headers, now=now) if rule.retry_after else None,
        status_code=status_code,
        request_sent=request_sent,
        refused=rule.refused,
        pause_provider=rule.pause_provider,
    )


def _finite_float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
