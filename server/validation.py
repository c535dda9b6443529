"""Checks shared by every request parser: the fields of a body (every bad one collected for the
422), JSON, integer parameters, the Idempotency-Key. server/job_body.py builds a job's JobSpec."""

from __future__ import annotations

from typing import Any

import orjson

from jobstream.server.problems import Problem

PROVIDERS = ("simulated", "openai", "anthropic")
METADATA_MAX_BYTES = 4096
MAX_DELAY_S = 366 * 86_400  # a delayed job waits at most about a year
MAX_RETAIN_S = 365 * 86_400  # retain_s: a job is kept at most a year after it ends
# jsonb refuses U+0000 in any string; orjson reads 1,024 levels of nesting but writes only 254.
NUL_MESSAGE = "must not contain U+0000 (NUL): PostgreSQL cannot store it"
MAX_DEPTH = 64
FAULT_KINDS = ("transient", "rate_limited", "permanent", "timeout", "drop")
INPUT_MAX_CHARS = 200_000  # the prompt, or all messages' text together
MAX_MESSAGES = 1000
ROLES = ("system", "developer", "user", "assistant")
# Content parts that carry text: chat completions' "text", the Responses API's input/output text.
TEXT_PARTS = ("text", "input_text", "output_text")


class Fields:
    """Collects field errors so one response names all of them."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.errors: list[dict[str, str]] = []

    def error(self, name: str, message: str) -> None:
        self.errors.append({"field": name, "message": message})

    def string(
        self, name: str, default: str | None, *, lo: int, hi: int, required: bool = False
    ) -> str | None:
        value = self.body.get(name, default)
        if value is None:
            if required:
                self.error(name, "is required")
            return None
        if not isinstance(value, str):
            self.error(name, "must be a string")
            return default
        if "\x00" in value:
            self.error(name, NUL_MESSAGE)
            return default
        if not lo <= len(value) <= hi:
            self.error(name, f"must be {lo} to {hi:,} characters long")
            return default
        return value

    def integer(self, name: str, default: int, *, lo: int, hi: int) -> int:
        value = self.body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, "must be an integer")
            return default
        if not lo <= value <= hi:
            self.error(name, f"must be between {lo} and {hi:,}")
            return default
        return value

    def number(self, name: str, default: float, *, lo: float, hi: float) -> float:
        value = self.body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(name, "must be a number")
            return default
        if not lo <= value <= hi:
            self.error(name, f"must be between {lo:g} and {hi:,g}")
            return default
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.body.get(name, default)
        if not isinstance(value, bool):
            self.error(name, "must be true or false")
            return default
        return value

    def obj(self, name: str) -> dict[str, Any]:
        value = self.body.get(name, {})
        if not isinstance(value, dict):
            self.error(name, "must be an object")
            return {}
        problem = storable(value, MAX_DEPTH)
        if problem is not None:
            self.error(name, problem)
            return {}
        return value


def storable(value: object, depth: int) -> str | None:
    """Why PostgreSQL's jsonb (or orjson, writing it) would refuse `value`, or None."""
    if depth < 0:
        return f"must be nested at most {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        return NUL_MESSAGE if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = storable(key, depth) or storable(item, depth - 1)
            if problem is not None:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = storable(item, depth - 1)
            if problem is not None:
                return problem
    return None


def ascii_int(raw: str, *, max_digits: int) -> int | None:
    """`raw` as a non-negative integer of at most `max_digits` ASCII digits, else None.

    str.isdigit() accepts '²' and other Unicode digits that int() refuses, and int() refuses
    more than 4,300 digits: both were 500s from a query parameter or a header.
    """
    if not 1 <= len(raw) <= max_digits or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)


def int_param(raw: str, maximum: int, slug: str, title: str, detail: str) -> int:
    """`raw` as a non-negative integer of at most `maximum`, else a 400 with this problem."""
    value = ascii_int(raw, max_digits=len(str(maximum)))
    if value is None or value > maximum:
        raise Problem(400, slug, title, detail)
    return value


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Problem(400, "invalid-json", "Invalid JSON", f"The body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise Problem(422, "validation", "Invalid request", "The body must be a JSON object.")
    return body


def idempotency_key(raw: str | None, *, required: bool) -> str | None:
    if raw is None:
        if required:
            raise Problem(
                400, "idempotency-key-required", "Idempotency-Key required",
                "This server requires an Idempotency-Key header on job creation.",
            )  # fmt: skip
        return None
    # Visible ASCII is "!" to "~": printable ASCII but the space.
    if not 1 <= len(raw) <= 255 or not (raw.isascii() and raw.isprintable()) or " " in raw:
        raise Problem(
            400,
            "invalid-idempotency-key",
            "Invalid Idempotency-Key",
            "Idempotency-Key must be 1 to 255 visible ASCII characters.",
        )
    return raw
