"""The Responses API's objects: a response, its message items and their usage.

A response is built from what never changes about its job (`Head`) and what the job's log or its
snapshot says now, so that a lifecycle event in the stream and `GET /v1/responses/{id}` describe
the same moment the same way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from jobstream.job_reads import Snapshot
from jobstream.rows import JobRow
from jobstream.server.v1 import ids
from jobstream.settings import Settings

Status = Literal["queued", "in_progress", "completed", "failed", "cancelled"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]

# jobstream's job status as a response's.
STATUSES: dict[str, Status] = {
    "queued": "queued",
    "running": "in_progress",
    "cancelling": "in_progress",  # until the worker confirms, the model may still write
    "succeeded": "completed",
    "failed": "failed",
    "dead": "failed",
    "cancelled": "cancelled",
}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message(
    job_id: uuid.UUID, attempt: int, text: str | None, status: ItemStatus
) -> dict[str, Any]:
    """An attempt's output item; `text` None: just added, no content part yet."""
    return {
        "id": ids.item_id(job_id, attempt),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [] if text is None else [output_text(text)],
    }


def usage(counts: dict[str, Any] | None) -> dict[str, Any] | None:
    """A result's usage (`input_tokens`, `output_tokens`, ...) in the Responses API's shape."""
    if counts is None:
        return None
    given, made = int(counts["input_tokens"]), int(counts["output_tokens"])
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": made,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": given + made,
    }


def error(job_error: dict[str, Any] | None) -> dict[str, Any] | None:
    """A failed job's error. `code` is one of OpenAI's; `type` keeps jobstream's class."""
    if job_error is None:
        return None
    kind = str(job_error.get("class", "error"))
    return {
        "code": "rate_limit_exceeded" if kind == "rate_limited" else "server_error",
        "message": str(job_error.get("message") or kind),
        "type": kind,
        "param": None,
    }


def _epoch(when: datetime | None) -> int | None:
    return int(when.timestamp()) if when is not None else None


def default_model(settings: Settings, provider: str) -> str:
    """The model a job that names none runs on, as far as the server knows it."""
    return settings.openai_model if provider == "openai" else provider


@dataclass(frozen=True)
class Head:
    """What a response says whatever its state: its request, echoed."""

    job_id: uuid.UUID
    created_at: int
    model: str
    instructions: str | None
    max_output_tokens: int
    temperature: float | None
    top_p: float | None
    metadata: dict[str, Any]

    @classmethod
    def of(cls, job: JobRow, settings: Settings) -> Head:
        payload = job.payload
        sampling = payload.get("sampling") or {}
        return cls(
            job_id=job.id,
            created_at=int(job.created_at.timestamp()),
            model=payload.get("model") or default_model(settings, job.provider),
            instructions=payload.get("instructions"),
            max_output_tokens=payload["max_tokens"],
            temperature=sampling.get("temperature"),
            top_p=sampling.get("top_p"),
            metadata=job.metadata,
        )

    def response(
        self,
        status: Status,
        *,
        output: list[dict[str, Any]] | None = None,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        completed_at: int | None = None,
    ) -> dict[str, Any]:
        return {
            "id": ids.response_id(self.job_id),
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            # Every response is a durable job, whether or not the request waited for it.
            "background": True,
            "completed_at": completed_at,
            "error": error,
            "incomplete_details": None,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "metadata": self.metadata,
            "model": self.model,
            "output": output or [],
            "parallel_tool_calls": False,
            "previous_response_id": None,
            "store": True,
            "temperature": self.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": "none",
            "tools": [],
            "top_p": self.top_p,
            "truncation": "disabled",
            "usage": usage,
        }


def from_snapshot(head: Head, snap: Snapshot) -> dict[str, Any]:
    """The response as `GET /v1/responses/{id}` shows it: the latest attempt's item, its text so
    far; a completed response has only the accepted attempt's, with the result's text."""
    job = snap.job
    status = STATUSES[job.status]
    attempt = job.attempts
    result = job.result or {}  # a completed job always has one
    output: list[dict[str, Any]] = []
    if status == "completed":
        output = [message(head.job_id, attempt, result["text"], "completed")]
    elif attempt > 0 and status != "queued":
        # Queued again means the last attempt failed and a retry waits: its text is not the
        # answer, and the retry's item will come.
        item_status: ItemStatus = "in_progress" if status == "in_progress" else "incomplete"
        output = [message(head.job_id, attempt, snap.text, item_status)]
    return head.response(
        status,
        output=output,
        usage=usage(result["usage"]) if status == "completed" else None,
        error=error(job.error) if status == "failed" else None,
        completed_at=_epoch(job.finished_at) if status == "completed" else None,
    )
