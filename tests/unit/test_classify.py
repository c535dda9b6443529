"""The classification of provider failures (docs/design.md): each row of classify.RULES met by
a failure of its own, then the parts around the table (statuses, Retry-After, transport errors of
httpx and the SDKs' httpx2, stream faults, errors inside a stream)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import partial
from typing import Any

import httpx
import httpx2
import pytest

from jobstream.errors import ProviderError
from jobstream.types import ErrorKind
from jobstream.worker.providers import classify

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limited"),
        (408, "transient"),
        (409, "transient"),
        (425, "transient"),
        (500, "transient"),
        (502, "transient"),
        (503, "transient"),
        (504, "transient"),
        (529, "transient"),
        (400, "permanent"),
        (401, "permanent"),
        (403, "permanent"),
        (404, "permanent"),
        (413, "permanent"),
        (422, "permanent"),
        (307, "permanent"),
    ],
)
def test_http_status_kind(status: int, kind: ErrorKind) -> None:
    error = classify.from_status(status, {}, detail="nope")
    assert error.kind == kind
    assert error.status_code == status
    assert error.request_sent is True
    assert str(error) == f"provider answered HTTP {status}: nope"


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": format_datetime(NOW + timedelta(seconds=30), usegmt=True)}, 30.0),
        ({"Retry-After": format_datetime(NOW - timedelta(seconds=30), usegmt=True)}, 0.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00"}, 0.0),  # naive date: read as UTC, past
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"retry-after-ms": "250"}, 0.25),
        # The millisecond header is the precise one: it wins over the rounded seconds.
        ({"Retry-After": "1", "retry-after-ms": "1200"}, 1.2),
        ({"Retry-After": "2", "retry-after-ms": "garbage"}, 2.0),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert classify.parse_retry_after(headers, now=NOW) == seconds


def test_rate_limited_carries_retry_after() -> None:
    error = classify.from_status(429, httpx.Headers({"Retry-After": "12"}), now=NOW)
    assert (error.kind, error.retry_after_s) == ("rate_limited", 12.0)


def test_unavailable_passes_retry_after_on() -> None:
    error = classify.from_status(503, {"Retry-After": "4"}, now=NOW)
    assert (error.kind, error.retry_after_s) == ("transient", 4.0)


@pytest.mark.parametrize(
    ("exc", "kind", "request_sent"),
    [
        # Nothing left us: safe to retry.
        (httpx.ConnectError("[Errno 111] Connection refused"), "transient", False),
        (httpx.ConnectError("[Errno -2] Name or service not known"), "transient", False),
        (httpx.ConnectTimeout("timed out"), "transient", False),
        (httpx.PoolTimeout("no connection"), "transient", False),
        # The request went out: the provider may be working and billing.
        (httpx.ReadTimeout("timed out"), "unknown", True),
        (httpx.ReadError("connection reset"), "unknown", True),
        (httpx.RemoteProtocolError("incomplete chunked read"), "unknown", True),
        (httpx.WriteError("broken pipe"), "unknown", True),
        (httpx.WriteTimeout("timed out"), "unknown", True),
        # A base URL without a scheme is a configuration error.
        (httpx.UnsupportedProtocol("missing http://"), "permanent", False),
    ],
)
def test_transport_error_by_type(
    exc: httpx.TransportError, kind: ErrorKind, request_sent: bool
) -> None:
    error = classify.from_transport(exc)
    assert (error.kind, error.request_sent) == (kind, request_sent)
    assert error.status_code is None
    assert str(exc) in str(error)


@pytest.mark.parametrize(("request_sent", "kind"), [(False, "transient"), (True, "unknown")])
def test_transport_error_trace_decides_over_type(request_sent: bool, kind: ErrorKind) -> None:
    # A keep-alive connection the server closed fails with a read error before any byte of
    # ours went out; only the connection trace can tell.
    error = classify.from_transport(httpx.ReadError("closed"), request_sent=request_sent)
    assert (error.kind, error.request_sent) == (kind, request_sent)


@pytest.mark.parametrize(
    "fault", ["first_token_timeout", "idle_timeout", "malformed_chunk", "ended_early"]
)
def test_stream_fault_after_send_is_unknown(fault: classify.StreamFault) -> None:
    error = classify.from_stream_fault(fault, detail="x")
    assert (error.kind, error.request_sent) == ("unknown", True)
    assert str(error).endswith(": x")


def test_first_token_timeout_before_send_is_transient() -> None:
    error = classify.from_stream_fault("first_token_timeout", request_sent=False)
    assert (error.kind, error.request_sent) == ("transient", False)


@pytest.mark.parametrize(
    ("payload", "kind", "status"),
    [
        ({"error": {"message": "overloaded", "code": 503}}, "transient", 503),
        ({"error": {"message": "bad", "type": "BadRequestError", "code": 400}}, "permanent", 400),
        ({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}, "rate_limited", None),
        ({"error": {"message": "?"}}, "transient", None),
        ({"object": "error", "message": "old vLLM", "code": 500}, "transient", 500),
        ({"error": "plain text"}, "transient", None),
    ],
)
def test_error_inside_the_stream(
    payload: dict[str, object], kind: ErrorKind, status: int | None
) -> None:
    error = classify.from_error_object(payload)
    assert (error.kind, error.status_code, error.request_sent) == (kind, status, True)


@pytest.mark.parametrize(
    ("status", "error_type", "in_stream", "kind", "pause"),
    [
        (529, "overloaded_error", False, "transient", True),
        (529, None, False, "transient", True),  # the status alone, a body without its type
        (200, "overloaded_error", True, "transient", True),
        (429, "rate_limit_error", False, "rate_limited", False),
        (500, "api_error", False, "transient", False),
        (200, "api_error", True, "transient", False),
        (400, "invalid_request_error", False, "permanent", False),
        (401, "authentication_error", False, "permanent", False),
        (403, "permission_error", False, "permanent", False),
        (404, "not_found_error", False, "permanent", False),
        (413, "request_too_large", False, "permanent", False),
        (200, "invalid_request_error", True, "permanent", False),
        (200, "something_new", True, "transient", False),  # unknown, after the work began
        (418, "something_new", False, "permanent", False),  # unknown type: the status decides
    ],
)
def test_anthropic_errors_by_type_and_status(
    status: int, error_type: str | None, in_stream: bool, kind: ErrorKind, pause: bool
) -> None:
    error = classify.from_error_type(status, error_type, {"retry-after": "4"}, in_stream=in_stream)
    assert (error.kind, error.pause_provider) == (kind, pause)
    # An error status billed nothing; an error event came after the work began.
    assert error.refused is not in_stream
    assert error.retry_after_s == (None if in_stream else 4.0)


@dataclass(frozen=True)
class Row:
    """A failure that should meet one row of classify.RULES, and what that row must make of it."""

    rule: str  # the row's id
    error: Callable[[], ProviderError]
    kind: ErrorKind
    pause: bool = False
    retry_after_s: float | None = None  # the failures below that carry one say 4 s
    refused: bool = False
    request_sent: bool = True


RETRY_4 = {"retry-after": "4"}


def anthropic(status: int, error_type: str | None, *, in_stream: bool = False) -> ProviderError:
    return classify.from_error_type(status, error_type, RETRY_4, in_stream=in_stream)


def in_stream(error: dict[str, object]) -> ProviderError:
    return classify.from_error_object({"error": error})


ANTHROPIC_ANSWERS: list[tuple[str, int, ErrorKind, bool]] = [
    ("overloaded_error", 503, "transient", True),
    ("rate_limit_error", 429, "rate_limited", False),
    ("api_error", 500, "transient", False),
    ("timeout_error", 504, "transient", False),
    ("invalid_request_error", 400, "permanent", False),
    ("authentication_error", 401, "permanent", False),
    ("billing_error", 402, "permanent", False),
    ("permission_error", 403, "permanent", False),
    ("not_found_error", 404, "permanent", False),
    ("request_too_large", 413, "permanent", False),
]

ROWS = [
    # A 529 pauses the provider even when its body names another type.
    Row("answer anthropic 529 * *", lambda: anthropic(529, "api_error"), "transient", pause=True,
        retry_after_s=4.0, refused=True),
    *[
        Row(f"answer anthropic * {name} *", partial(anthropic, status, name), kind,
            pause=pause, retry_after_s=4.0, refused=True)
        for name, status, kind, pause in ANTHROPIC_ANSWERS
    ],
    Row("answer * 429 * *", lambda: classify.from_status(429, RETRY_4), "rate_limited",
        retry_after_s=4.0, refused=True),
    # An Anthropic type the table does not name falls to the status rows.
    Row("answer * 408 409 425 * *", lambda: anthropic(409, "something_new"), "transient",
        retry_after_s=4.0, refused=True),
    # OpenAI's 529 is a plain 5xx: no pause.
    Row("answer * 5xx * *", lambda: classify.from_status(529, RETRY_4), "transient",
        retry_after_s=4.0, refused=True),
    Row("answer * * * *", lambda: classify.from_status(422, RETRY_4), "permanent",
        retry_after_s=4.0, refused=True),
    *[
        Row(f"stream anthropic * {name} *", partial(anthropic, 200, name, in_stream=True),
            kind, pause=pause)
        for name, _, kind, pause in ANTHROPIC_ANSWERS
    ],
    Row("stream anthropic * * *", lambda: anthropic(200, "something_new", in_stream=True),
        "transient"),
    Row("stream openai 429 * *", lambda: in_stream({"code": 429}), "rate_limited"),
    Row("stream openai 408 409 425 * *", lambda: in_stream({"code": 425}), "transient"),
    Row("stream openai 5xx * *", lambda: in_stream({"code": 503}), "transient"),
    # A rate-limit type does not beat an HTTP-like code that says otherwise.
    Row("stream openai 4xx * *", lambda: in_stream({"code": 400, "type": "rate_limit"}),
        "permanent"),
    Row("stream openai * *rate_limit* *", lambda: in_stream({"code": "rate_limit_exceeded"}),
        "rate_limited"),
    Row("stream openai * * *",
        lambda: classify.from_error_object({"object": "error", "message": "old vLLM"}),
        "transient"),
    Row("transport * * UnsupportedProtocol *",
        lambda: classify.from_transport(httpx2.UnsupportedProtocol("no http://")), "permanent",
        request_sent=False),
    Row("transport * * * no", lambda: classify.from_transport(httpx2.ConnectError("refused")),
        "transient", request_sent=False),
    Row("transport * * * yes", lambda: classify.from_stream_fault("idle_timeout"), "unknown"),
]  # fmt: skip


def test_every_row_of_the_table_has_its_case() -> None:
    ids = [rule.id for rule in classify.RULES]
    assert len(set(ids)) == len(ids), "two rows that match the same failures"
    assert sorted(row.rule for row in ROWS) == sorted(ids)


@pytest.mark.parametrize("row", ROWS, ids=[row.rule for row in ROWS])
def test_each_row_of_the_table(row: Row, monkeypatch: pytest.MonkeyPatch) -> None:
    decided: list[classify.Rule] = []
    lookup = classify.rule_for

    def recording(*args: Any, **kwargs: Any) -> classify.Rule:
        decided.append(lookup(*args, **kwargs))
        return decided[-1]

    monkeypatch.setattr(classify, "rule_for", recording)
    error = row.error()
    # This row decided, not one above it that shadows it.
    assert [rule.id for rule in decided] == [row.rule]
    assert (error.kind, error.pause_provider, error.retry_after_s, error.refused) == (
        row.kind,
        row.pause,
        row.retry_after_s,
        row.refused,
    )
    assert error.request_sent is row.request_sent
