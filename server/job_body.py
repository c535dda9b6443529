"""Turn a job's request body into a JobSpec, or a 422 naming every bad field.

A plain body (the common fields, each of the right type) takes a lean path that only ever
accepts; anything else, and every refusal with its message, goes field by field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from jobstream.jobspec import DEFAULT_TIMEOUT_S, JobSpec, Message, prompt_of
from jobstream.server.problems import Problem
from jobstream.server.simulated_rules import SimulatedRules
from jobstream.server.validation import (
    FAULT_KINDS,
    INPUT_MAX_CHARS,
    MAX_DELAY_S,
    MAX_DEPTH,
    MAX_MESSAGES,
    MAX_RETAIN_S,
    METADATA_MAX_BYTES,
    NUL_MESSAGE,
    PROVIDERS,
    ROLES,
    TEXT_PARTS,
    Fields,
    storable,
)
from jobstream.worker import webhook_targets


def job_spec(
    body: dict[str, Any],
    *,
    default_provider: str,
    simulated: SimulatedRules,
    allow_private_webhooks: bool = False,
) -> JobSpec:
    """The job `body` asks for; `allow_private_webhooks` is JOBSTREAM_WEBHOOK_ALLOW_PRIVATE."""
    spec = plain_spec(body, default_provider, simulated)
    if spec is not None:
        return spec
    return checked_spec(
        body,
        default_provider=default_provider,
        simulated=simulated,
        allow_private_webhooks=allow_private_webhooks,
    )


def checked_spec(
    body: dict[str, Any],
    *,
    default_provider: str,
    simulated: SimulatedRules,
    allow_private_webhooks: bool = False,
) -> JobSpec:
    """job_spec field by field: every field checked, every error collected for the 422."""
    fields = Fields(body)
    known = {
        "prompt", "provider", "model", "max_tokens", "priority", "max_attempts",
        "retry_unknown", "timeout_s", "webhook_url", "metadata", "simulate", "run_at", "delay_s",
        "messages", "instructions", "temperature", "top_p", "retain_s",
    }  # fmt: skip
    for name in sorted(set(body) - known):
        fields.error(name, "unknown field")
    messages = _messages(fields) if body.get("messages") is not None else None
    if messages is None:
        prompt = fields.string("prompt", None, lo=1, hi=INPUT_MAX_CHARS, required=True) or ""
    else:
        if body.get("prompt") is not None:
            fields.error("prompt", "give prompt or messages, not both")
        prompt = prompt_of(messages) if messages else ""
    instructions = fields.string("instructions", None, lo=1, hi=INPUT_MAX_CHARS)
    temperature = _optional_number(fields, "temperature", lo=0, hi=2)
    top_p = _optional_number(fields, "top_p", lo=0, hi=1)
    provider = fields.string("provider", default_provider, lo=1, hi=64) or default_provider
    if provider not in PROVIDERS:
        fields.error("provider", f"must be one of {', '.join(PROVIDERS)}")
    model = fields.string("model", None, lo=1, hi=200)
    max_tokens = fields.integer("max_tokens", 512, lo=1, hi=32_768)
    envelope = checked_envelope(
        fields, allow_private_webhooks=allow_private_webhooks, max_attempts=3,
        timeout_s=DEFAULT_TIMEOUT_S,
    )  # fmt: skip
    simulate = fields.obj("simulate")
    _check_simulate(fields, simulate)
    for name, message in simulated.refusals(
        provider=provider, simulate=simulate, max_tokens=max_tokens, timeout_s=envelope.timeout_s
    ):
        fields.error(name, message)
    raise_if_invalid(fields)
    return JobSpec(
        prompt=prompt,
        provider=provider,
        model=model,
        max_tokens=max_tokens,
        simulate=simulate,
        messages=messages,
        instructions=instructions,
        temperature=temperature,
        top_p=top_p,
        **envelope.fields(),
    )


@dataclass(frozen=True)
class Envelope:
    """What every job's create may set, whatever the job: when and how it runs, who hears of
    its end, how long it is kept."""

    priority: int
    max_attempts: int
    retry_unknown: bool
    timeout_s: float
    webhook_url: str | None
    metadata: dict[str, Any]
    run_at: datetime | None
    delay_s: float | None
    retain_s: int | None

    def fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def checked_envelope(
    fields: Fields,
    *,
    allow_private_webhooks: bool,
    max_attempts: int,
    timeout_s: float,
    retry_unknown: bool = False,
) -> Envelope:
    """The envelope's fields of `fields.body`, each bad one noted in `fields`; `max_attempts`,
    `timeout_s` and `retry_unknown` are the defaults of the job asked for."""
    body = fields.body
    priority = fields.integer("priority", 0, lo=-10, hi=10)
    attempts = fields.integer("max_attempts", max_attempts, lo=1, hi=10)
    retry_unknown = fields.boolean("retry_unknown", retry_unknown)
    timeout = fields.number("timeout_s", timeout_s, lo=1, hi=3600)
    webhook_url = fields.string("webhook_url", None, lo=1, hi=2000)
    if webhook_url is not None and not webhook_url.startswith(("http://", "https://")):
        fields.error("webhook_url", "must be an http:// or https:// URL")
    elif webhook_url is not None:
        # A forbidden address or localhost, however spelled, is refused now, so the client hears
        # of it instead of the delivery failing later; any other name is judged by the worker
        # when it resolves it.
        refusal = webhook_targets.url_refusal(webhook_url, allow_private=allow_private_webhooks)
        if refusal is not None:
            fields.error("webhook_url", refusal)
    metadata = fields.obj("metadata")
    if len(orjson.dumps(metadata)) > METADATA_MAX_BYTES:
        fields.error("metadata", f"must be at most {METADATA_MAX_BYTES} bytes as JSON")
    run_at = _run_at(fields)
    delay_s = None
    if body.get("delay_s") is not None:
        delay_s = fields.number("delay_s", 0.0, lo=0, hi=MAX_DELAY_S)
        if run_at is not None:
            fields.error("delay_s", "give run_at or delay_s, not both")
    retain_s = None
    if body.get("retain_s") is not None:
        retain_s = fields.integer("retain_s", 1, lo=1, hi=MAX_RETAIN_S)
    return Envelope(
        priority, attempts, retry_unknown, timeout, webhook_url, metadata, run_at, delay_s,
        retain_s,
    )  # fmt: skip


def raise_if_invalid(fields: Fields) -> None:
    """The 422 naming every bad field, if any."""
    if fields.errors:
        raise Problem(
            422,
            "validation",
            "Invalid request",
            f"{len(fields.errors)} field(s) are invalid.",
            errors=fields.errors,
        )


# What most jobs send, with the default of each field that is left out. A batch create spends most
# of its server time here: for a body of these fields only, each of the right type, plain_spec
# checks the bounds inline and builds the JobSpec without collecting errors (checked_spec).
_PLAIN_FIELDS = frozenset(
    {"prompt", "provider", "model", "max_tokens", "priority", "max_attempts", "retry_unknown",
     "timeout_s", "metadata", "simulate"}
)  # fmt: skip
_PLAIN_SIMULATE = frozenset({"tokens_per_second", "tokens", "pattern", "first_token_delay_s"})
_NUMBER = (int, float)


def plain_spec(
    body: dict[str, Any], default_provider: str, simulated: SimulatedRules
) -> JobSpec | None:
    """The JobSpec of a plain, valid body, as checked_spec makes it; None for anything else
    (another field, a wrong type, a value out of bounds), which checked_spec then judges and
    explains. It only ever accepts: every refusal and its message come from checked_spec.
    tests/unit/test_plain_spec.py holds the two to the same answers."""
    if not body.keys() <= _PLAIN_FIELDS:
        return None
    get = body.get
    prompt = get("prompt")
    if type(prompt) is not str or not 1 <= len(prompt) <= INPUT_MAX_CHARS or "\x00" in prompt:
        return None
    provider = get("provider", default_provider)
    if type(provider) is not str or provider not in PROVIDERS:
        return None
    model = get("model")
    if model is not None and (
        type(model) is not str or not 1 <= len(model) <= 200 or "\x00" in model
    ):
        return None
    max_tokens = get("max_tokens", 512)
    priority = get("priority", 0)
    max_attempts = get("max_attempts", 3)
    retry_unknown = get("retry_unknown", False)
    timeout_s = get("timeout_s", DEFAULT_TIMEOUT_S)
    if not (
        type(max_tokens) is int
        and 1 <= max_tokens <= 32_768
        and type(priority) is int
        and -10 <= priority <= 10
        and type(max_attempts) is int
        and 1 <= max_attempts <= 10
        and type(retry_unknown) is bool
        and type(timeout_s) in _NUMBER
        and 1 <= timeout_s <= 3600
    ):
        return None
    metadata = get("metadata")
    if metadata is None:
        if "metadata" in body:
            return None
        metadata = {}
    elif (
        type(metadata) is not dict
        or storable(metadata, MAX_DEPTH) is not None
        or len(orjson.dumps(metadata)) > METADATA_MAX_BYTES
    ):
        return None
    simulate = get("simulate")
    if simulate is None:
        if "simulate" in body:
            return None
        simulate = {}
    elif type(simulate) is not dict or not _plain_simulate(simulate):
        return None
    if not simulated.allows_plain(provider=provider, simulate=simulate, max_tokens=max_tokens):
        return None
    # The body's names are JobSpec's and the defaults above are JobSpec's: a field the body
    # left out takes its default there.
    normalised = {
        "provider": provider,
        "timeout_s": float(timeout_s),
        "metadata": metadata,
        "simulate": simulate,
    }
    return JobSpec(**body | normalised)


def _plain_simulate(simulate: dict[str, Any]) -> bool:
    """`simulate` holds no faults and passes _check_simulate: no error to report."""
    if not simulate.keys() <= _PLAIN_SIMULATE:
        return False
    get = simulate.get
    tokens_per_second = get("tokens_per_second", 40)
    tokens = get("tokens", 1)
    delay = get("first_token_delay_s", 0.2)
    return (
        type(tokens_per_second) in _NUMBER
        and 0 <= tokens_per_second <= 100_000
        and type(tokens) is int
        and 0 <= tokens <= 1_000_000
        and type(delay) in _NUMBER
        and 0 <= delay <= 3600
        and get("pattern", "words") in ("words", "count")
    )


def _optional_number(fields: Fields, name: str, *, lo: float, hi: float) -> float | None:
    if fields.body.get(name) is None:
        return None
    return fields.number(name, 0.0, lo=lo, hi=hi)


def _messages(fields: Fields) -> list[Message]:
    """`messages` as stored: each a role and its text, parts of text joined.

    Content is a string or a list of text parts (`{"type": "text", "text": ...}`, or the
    Responses API's `input_text`/`output_text`); other parts (images, files) are refused, as is
    more text than a prompt may hold.
    """
    raw = fields.body["messages"]
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        fields.error("messages", f"must be a list of 1 to {MAX_MESSAGES} messages")
        return []
    messages: list[Message] = []
    for i, item in enumerate(raw):
        name = f"messages[{i}]"
        if not isinstance(item, dict):
            fields.error(name, "must be an object with role and content")
            continue
        # `type: message` is how the Responses API spells a message item; nothing else is one.
        for key in sorted(set(item) - {"role", "content", "type"}):
            fields.error(f"{name}.{key}", "unknown field")
        if item.get("type", "message") != "message":
            fields.error(f"{name}.type", "only messages are supported")
        role = item.get("role")
        if role not in ROLES:
            fields.error(f"{name}.role", f"must be one of {', '.join(ROLES)}")
        text = _content_text(fields, f"{name}.content", item.get("content"))
        if text is not None and isinstance(role, str):
            messages.append({"role": role, "content": text})
    total = sum(len(m["content"]) for m in messages)
    if total > INPUT_MAX_CHARS:
        fields.error("messages", f"must hold at most {INPUT_MAX_CHARS:,} characters of text")
    return messages


def _content_text(fields: Fields, name: str, content: object) -> str | None:
    if isinstance(content, list):
        parts = [_part_text(fields, f"{name}[{j}]", part) for j, part in enumerate(content)]
        texts = [text for text in parts if text is not None]
        if len(texts) < len(parts):
            return None
        content = "".join(texts)
    if not isinstance(content, str) or not content:
        fields.error(name, "must be a non-empty string or a list of text parts")
        return None
    if "\x00" in content:
        fields.error(name, NUL_MESSAGE)
        return None
    return content


def _part_text(fields: Fields, name: str, part: object) -> str | None:
    if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
        fields.error(name, f"must be a text part (type {', '.join(TEXT_PARTS)})")
        return None
    text = part.get("text")
    if not isinstance(text, str):
        fields.error(f"{name}.text", "must be a string")
        return None
    return text


def _run_at(fields: Fields) -> datetime | None:
    raw = fields.body.get("run_at")
    if raw is None:
        return None
    if not isinstance(raw, str):
        fields.error("run_at", "must be an RFC 3339 date-time string")
        return None
    try:
        # Python 3.11 reads every RFC 3339 form, `Z` included.
        when = datetime.fromisoformat(raw)
    except ValueError:
        fields.error("run_at", "must be an RFC 3339 date-time, e.g. 2026-12-01T09:30:00Z")
        return None
    if when.tzinfo is None:
        fields.error("run_at", "must name its offset from UTC (e.g. Z or +01:00)")
        return None
    if when - datetime.now(UTC) > timedelta(seconds=MAX_DELAY_S):
        fields.error("run_at", "must be at most a year ahead")
        return None
    return when


def _check_simulate(fields: Fields, simulate: dict[str, Any]) -> None:
    sim = Fields(simulate)
    known = {"tokens_per_second", "tokens", "pattern", "first_token_delay_s", "faults",
             "cost_per_token"}  # fmt: skip
    for name in sorted(set(simulate) - known):
        sim.error(name, "unknown field")
    sim.number("tokens_per_second", 40, lo=0, hi=100_000)
    sim.integer("tokens", 1, lo=0, hi=1_000_000)
    sim.number("first_token_delay_s", 0.2, lo=0, hi=3600)
    if simulate.get("pattern", "words") not in ("words", "count"):
        sim.error("pattern", "must be words or count")
    faults = simulate.get("faults", [])
    if not isinstance(faults, list):
        sim.error("faults", "must be a list")
        faults = []
    for i, fault in enumerate(faults):
        if not isinstance(fault, dict):
            sim.error(f"faults[{i}]", "must be an object")
            continue
        one = Fields(fault)
        for name in sorted(set(fault) - {"attempt", "after_tokens", "kind", "retry_after_s"}):
            one.error(name, "unknown field")
        one.integer("attempt", 1, lo=1, hi=10)
        one.integer("after_tokens", 0, lo=0, hi=1_000_000)
        one.number("retry_after_s", 1, lo=0, hi=3600)
        if fault.get("kind") not in FAULT_KINDS:
            one.error("kind", f"must be one of {', '.join(FAULT_KINDS)}")
        sim.errors += [{**e, "field": f"faults[{i}].{e['field']}"} for e in one.errors]
    fields.errors += [{**e, "field": f"simulate.{e['field']}"} for e in sim.errors]
