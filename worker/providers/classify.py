"""Provider failures sorted into the four kinds the attempt runner acts on (docs/design.md).

Every way an HTTP provider call can fail ends in one of these functions, so the retry policy is
reviewed here and nowhere else:

- an HTTP status answer (`from_status`): the server saw the request and refused it;
- a transport error (`from_transport`): safe to retry only if the request never left us;
- a fault of the stream itself (`from_stream_fault`): timeouts, malformed or truncated streams;
- an error object sent inside a 200 stream (`from_error_object`), as vLLM and others do;
- an Anthropic error (`from_error_type`), by the body's `error.type` as well as its status:
  an answer with an error status, or an `error` event inside a 200 stream.

`request_sent` is True once we started writing the request: from then on the provider may have
started (and billed) the work, so a failure without an answer is an unknown outcome.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal

import httpx

from jobstream.errors import ProviderError
from jobstream.types import ErrorKind

# 4xx answers a later try can succeed with: request timeout, conflict, too early.
_TRANSIENT_4XX: Final = frozenset({408, 409, 425})

# Transport errors raised before any byte of the request is written: connection refused, DNS,
# connect timeout, no free pooled connection.
_BEFORE_SEND: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

StreamFault = Literal["first_token_timeout", "idle_timeout", "malformed_chunk", "ended_early"]

_FAULT_TEXT: Final[dict[StreamFault, str]] = {
    "first_token_timeout": "no first token before the first-token timeout",
    "idle_timeout": "stream went idle between chunks",
    "malformed_chunk": "malformed stream chunk",
    "ended_early": "stream ended before completion",
}


def kind_for_status(status_code: int) -> ErrorKind:
    """The kind of an HTTP error status (anything that is not a 2xx)."""
    if status_code == 429:
        return "rate_limited"
    if status_code in _TRANSIENT_4XX or status_code >= 500:
        return "transient"
    # Validation, auth, not found, and redirects we do not follow: a retry would fail the same way.
    return "permanent"


def parse_retry_after(
    headers: httpx.Headers | Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """Seconds to wait, from `retry-after-ms` (OpenAI's precise form) or `Retry-After`
    (delta-seconds or an HTTP date). None when absent or unreadable; never negative."""
    lookup = headers if isinstance(headers, httpx.Headers) else httpx.Headers(headers)
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
    headers: httpx.Headers | Mapping[str, str],
    *,
    detail: str = "",
    now: datetime | None = None,
) -> ProviderError:
    """An error answer. The request reached the provider (request_sent=True), but an error
    status means it produced (and bills) nothing (refused=True); the kind says whether a retry
    can help."""
    message = f"provider answered HTTP {status_code}"
    if detail:
        message = f"{message}: {detail}"
    return ProviderError(
        kind_for_status(status_code),
        message,
        # A 503 may carry Retry-After too: pass it on whatever the kind.
        retry_after_s=parse_retry_after(headers, now=now),
        status_code=status_code,
        request_sent=True,
        refused=True,
    )


def from_transport(exc: httpx.TransportError, *, request_sent: bool | None = None) -> ProviderError:
    """A transport failure. `request_sent` comes from the connection trace when known; without
    it the exception type decides (connect-phase errors happen before anything is sent)."""
    if isinstance(exc, httpx.UnsupportedProtocol):
        # A base URL without http(s)://: configuration, not weather.
        return ProviderError("permanent", f"bad provider URL: {exc}", request_sent=False)
    sent = not isinstance(exc, _BEFORE_SEND) if request_sent is None else request_sent
    description = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if not sent:
        return ProviderError("transient", f"request not sent: {description}", request_sent=False)
    return ProviderError("unknown", f"no complete answer after the request was sent: {description}")


def from_connection(description: str, *, request_sent: bool) -> ProviderError:
    """A connection that failed without an answer, described; `request_sent` as known."""
    if not request_sent:
        return ProviderError("transient", f"request not sent: {description}", request_sent=False)
    return ProviderError("unknown", f"no complete answer after the request was sent: {description}")


def from_stream_fault(
    fault: StreamFault, *, request_sent: bool = True, detail: str = ""
) -> ProviderError:
    """A failure we detect ourselves. Once the request is out, the provider may still be working
    (and billing): unknown. A first-token timeout that fires while still connecting is not."""
    message = _FAULT_TEXT[fault]
    if detail:
        message = f"{message}: {detail}"
    if not request_sent:
        return ProviderError("transient", f"request not sent: {message}", request_sent=False)
    return ProviderError("unknown", message)


def from_error_object(payload: Mapping[str, Any]) -> ProviderError:
    """An error the server reported inside a 200 stream, either `{"error": {...}}` (OpenAI,
    current vLLM) or a top-level `{"object": "error", ...}` (older vLLM). The server said it
    failed, so the outcome is known: an HTTP-like `code` decides the kind, else transient."""
    inner = payload.get("error")
    body: Mapping[str, Any] = inner if isinstance(inner, Mapping) else payload
    message = body.get("message")
    text = message if isinstance(message, str) and message else "error inside the stream"
    code = body.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    if status is not None and 400 <= status <= 599:
        kind = kind_for_status(status)
    elif "rate_limit" in f"{code} {body.get('type')}":
        kind = "rate_limited"
    else:
        kind = "transient"
    return ProviderError(kind, f"provider reported an error mid-stream: {text}", status_code=status)


# Anthropic's documented error types (https://docs.claude.com/en/api/errors) and their kinds.
# A status alone is not enough: an in-stream `error` event arrives on a 200, and the SDK raises it
# as a bare APIStatusError with status 200; only the body's type says what failed.
_ANTHROPIC_KINDS: Final[dict[str, ErrorKind]] = {
    "invalid_request_error": "permanent",  # 400 (and other 4xx the list does not name)
    "authentication_error": "permanent",  # 401
    "billing_error": "permanent",  # 402
    "permission_error": "permanent",  # 403
    "not_found_error": "permanent",  # 404
    "request_too_large": "permanent",  # 413
    "rate_limit_error": "rate_limited",  # 429
    "api_error": "transient",  # 500
    "timeout_error": "transient",  # 504
    "overloaded_error": "transient",  # 529, and in a stream during high load
}


def from_error_type(
    status_code: int,
    error_type: str | None,
    headers: httpx.Headers | Mapping[str, str],
    *,
    detail: str = "",
    in_stream: bool = False,
    now: datetime | None = None,
) -> ProviderError:
    """An Anthropic error: an answer with an error status, or (`in_stream`) an `error` event
    after a 200. The type decides where it is known, else the status. An overload is transient
    and pauses the provider for every worker, as a 429 does. An error status billed nothing
    (refused); an error inside a stream came after the work began, so it may have."""
    kind = _ANTHROPIC_KINDS.get(error_type or "")
    if kind is None:
        kind = "transient" if in_stream else kind_for_status(status_code)
    where = "mid-stream" if in_stream else f"HTTP {status_code}"
    message = f"provider answered {where}: {error_type or 'error'}"
    if detail:
        message = f"{message}: {detail}"
    return ProviderError(
        kind,
        message,
        # A 200 stream's headers say nothing about the error inside it.
        retry_after_s=None if in_stream else parse_retry_after(headers, now=now),
        status_code=None if in_stream else status_code,
        request_sent=True,
        refused=not in_stream,
        pause_provider=error_type == "overloaded_error" or status_code == 529,
    )


def _finite_float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
