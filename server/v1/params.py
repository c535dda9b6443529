"""`POST /v1/responses`' body: what it asks of jobstream, as the body `POST /api/jobs` takes.

OpenAI's names map onto jobstream's (`input` to `prompt` or `messages`, `max_output_tokens` to
`max_tokens`); jobstream's own options (`simulate`, `max_attempts`, `webhook_url`...) ride along
as extra body fields, under their own names, and are checked as on /api/jobs. Parameters that
would change what the model does in ways jobstream cannot honour (tools, reasoning, structured
output, conversation state) are refused rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobstream.server.problems import Problem

# OpenAI's names for what jobstream names otherwise (`input` is a prompt or messages).
OPENAI_NAMES = {"prompt": "input", "messages": "input", "max_tokens": "max_output_tokens"}
SAME_NAME = ("model", "instructions", "metadata", "temperature", "top_p")
# Accepted and without effect on the answer: hints for OpenAI's own service.
IGNORED = frozenset({
    "include", "stream_options", "service_tier", "user", "safety_identifier",
    "prompt_cache_key", "prompt_cache_retention", "truncation", "parallel_tool_calls",
    "background_options",
})  # fmt: skip
# Accepted only empty (or absent, or null), and tool_choice only as "none" or "auto".
UNSUPPORTED_UNLESS_EMPTY = (
    "tools", "tool_choice", "previous_response_id", "conversation", "prompt", "reasoning",
    "max_tool_calls", "top_logprobs", "context_management", "image", "moderation",
    "access_programs", "prompt_cache_options",
)  # fmt: skip
# jobstream's names for what OpenAI names otherwise: given as extras, they would say it twice.
TAKEN = ("messages", "max_tokens")
# Keys a message item may carry when a previous response's output is passed back as input.
ECHOED_ITEM_KEYS = ("id", "status")


@dataclass(frozen=True)
class CreateRequest:
    job: dict[str, Any]  # a body for job_body.job_spec
    background: bool
    stream: bool


def parse(body: dict[str, Any]) -> CreateRequest:
    errors: list[dict[str, str]] = []
    job: dict[str, Any] = {}
    flags = {name: body.get(name) for name in ("background", "stream")}
    for name, value in flags.items():
        if value is not None and not isinstance(value, bool):
            errors.append({"field": name, "message": "must be true or false"})
    if body.get("store") is False:
        errors.append({"field": "store", "message": "jobstream stores every response"})
    text = body.get("text")
    if text is not None and text != {} and text != {"format": {"type": "text"}}:
        errors.append({"field": "text", "message": "only text output (format type text)"})
    for name in UNSUPPORTED_UNLESS_EMPTY:
        value = body.get(name)
        empty = value in (None, [], {}) or (name == "tool_choice" and value in ("none", "auto"))
        if not empty:
            errors.append({"field": name, "message": "is not supported by jobstream"})
    handled = {"input", "max_output_tokens", *SAME_NAME, *IGNORED, *UNSUPPORTED_UNLESS_EMPTY,
               *flags, "store", "text"}  # fmt: skip
    for name, value in body.items():
        if name in TAKEN:
            errors.append({"field": name, "message": f"send it as {OPENAI_NAMES[name]}"})
        elif name not in handled:
            job[name] = value  # jobstream's own options; validation names the unknown ones
    for name in SAME_NAME:
        if body.get(name) is not None:
            job[name] = body[name]
    if body.get("max_output_tokens") is not None:
        job["max_tokens"] = body["max_output_tokens"]
    given = body.get("input")
    if isinstance(given, list):
        job["messages"] = [_message(item) for item in given]
    elif given is not None:
        job["prompt"] = given
    else:
        errors.append({"field": "input", "message": "is required"})
    if errors:
        raise invalid(errors)
    return CreateRequest(
        job, background=flags["background"] is True, stream=flags["stream"] is True
    )


def _message(item: Any) -> Any:
    if isinstance(item, dict) and item.get("type", "message") == "message":
        return {k: v for k, v in item.items() if k not in ECHOED_ITEM_KEYS}
    return item


def openai_field(name: str) -> str:
    """A field as /api/jobs' validation names it, in this API's spelling."""
    head, dot, rest = name.partition(".")
    base, bracket, index = head.partition("[")
    return OPENAI_NAMES.get(base, base) + bracket + index + dot + rest


def invalid(errors: list[dict[str, str]]) -> Problem:
    return Problem(
        422, "validation", "Invalid request", f"{len(errors)} field(s) are invalid.", errors=errors
    )
