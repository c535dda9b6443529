"""Schemathesis hooks for the fuzz runs (tests/e2e/schemathesis.toml loads this file).

They bound what a valid request may legitimately cost, so that a case is quick without being any
less of a test: the checks still see every answer.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import strategies as st

from jobstream.server.events_api import MAX_WAIT_S as LONGEST_WAIT_S

EVENTS = "GET /api/jobs/{job_id}/events"
CREATE_RESPONSE = "POST /v1/responses"
# A long-poll of a job that never changes waits its whole `wait`, up to 30 s: that is the contract,
# not a defect, and one such case cost the fuzzer 30 s. Valid waits are kept under this.
MAX_WAIT_S = 0.5


def _is(context: schemathesis.HookContext, label: str) -> bool:
    return context.operation is not None and context.operation.label == label


@schemathesis.hook
def map_query(
    context: schemathesis.HookContext, query: dict[str, Any] | None
) -> dict[str, Any] | None:
    if not _is(context, EVENTS) or not query:
        return query
    wait = query.get("wait")
    # Only numbers the server accepts are shortened; every invalid value goes as generated.
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= LONGEST_WAIT_S:
        return {**query, "wait": min(wait, MAX_WAIT_S)}
    return query


@schemathesis.hook
def flatmap_headers(
    context: schemathesis.HookContext, headers: dict[str, Any] | None
) -> st.SearchStrategy[dict[str, Any] | None]:
    """Half the reads of events ask for SSE.

    OpenAPI ignores an `Accept` parameter (content negotiation is the responses' media types), so
    nothing else would ever send `text/event-stream` and the SSE path would go unfuzzed.
    """
    if not _is(context, EVENTS) or (headers is not None and not isinstance(headers, dict)):
        return st.just(headers)
    return st.sampled_from([headers, {**(headers or {}), "Accept": "text/event-stream"}])


@schemathesis.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    """A create of a response that neither streams nor runs in the background waits for its job
    to end: minutes for the jobs the fuzzer makes, which is the contract, not a defect. Those
    creates run in the background instead; the body is checked the same way either way."""
    if not _is(context, CREATE_RESPONSE) or not isinstance(body, dict):
        return body
    background = body.get("background")
    if body.get("stream") is not True and (background is None or background is False):
        return {**body, "background": True}
    return body
