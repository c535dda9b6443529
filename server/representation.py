"""Jobs as JSON, in the shapes docs/design.md gives ("The HTTP surface")."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from jobstream.job_reads import Snapshot
from jobstream.jobspec import BUILT_IN_JOB
from jobstream.rows import AttemptRow, JobRow
from jobstream.server.stream_tokens import GenerationTokens


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@functools.lru_cache(maxsize=64)
def _creation_time(value: datetime) -> str:
    """A create's `created_at`: the jobs of one statement share it, so a batch of 1,000 formats
    it once (isoformat of an aware datetime takes 2 µs, a cache hit 0.2). Keyed by equality,
    which ignores the offset: right because asyncpg hands every timestamptz out in UTC."""
    return value.isoformat()


def links(job_id: str, tokens: GenerationTokens) -> dict[str, str]:
    base = f"/api/jobs/{job_id}"
    # The token lets a browser's EventSource (which cannot send headers) read this job's events,
    # while the key generation `tokens` is bound to stays good (server/stream_tokens.py).
    events_url = f"{base}/events?token={tokens.issue(job_id)}"
    return {"events_url": events_url, "poll_url": base, "cancel_url": f"{base}/cancel"}


def created(
    job: JobRow, tokens: GenerationTokens, estimated_time_sec: float | None = None
) -> dict[str, Any]:
    job_id = str(job.id)
    return {
        "id": job_id,
        "status": job.status,
        "created_at": _creation_time(job.created_at),
        "last_seq": job.last_seq,
        # Seconds until it is done, as things stand (server/estimates.py); null: no idea yet.
        "estimated_time_sec": estimated_time_sec,
        **links(job_id, tokens),
    }


def _id(value: Any) -> str | None:
    return str(value) if value is not None else None


def lineage(job: JobRow) -> dict[str, str | None]:
    """An operator's retry of a dead job is a new job: the links between the two."""
    return {"retry_of": _id(job.retry_of), "retried_as": _id(job.retried_as)}


def summary(job: JobRow, tokens: GenerationTokens) -> dict[str, Any]:
    """A row of the job list."""
    job_id = str(job.id)
    return {
        "id": job_id,
        "status": job.status,
        "job": job.job_name,
        "provider": job.provider,
        "prompt_preview": job.payload.get("prompt", "")[:120],
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "run_at": _iso(job.run_after) if job.status == "queued" else None,
        "finished_at": _iso(job.finished_at),
        "metadata": job.metadata,
        **lineage(job),
        **links(job_id, tokens),
    }


def _attempt(row: AttemptRow) -> dict[str, Any]:
    cost = row.cost_usd
    return {
        "attempt": row.attempt,
        "outcome": row.outcome,
        "worker_id": row.worker_id,
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "error": (
            {"class": row.error_class, "message": row.error_detail} if row.error_class else None
        ),
        "provider": row.provider,
        "model": row.model,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost": str(cost) if cost is not None else None,
        "cost_known": row.cost_known,
        "price_source": row.price_source,
    }


# The built-in job's input: the fields of its payload that its create asked for.
_BUILT_IN_INPUT = ("prompt", "messages", "instructions", "model", "max_tokens", "sampling")


def job_input(job: JobRow) -> Any:
    """What the job was asked to do: a named job's validated input, or the built-in job's
    prompt fields."""
    payload = job.payload
    if job.job_name != BUILT_IN_JOB:
        return payload.get("input")
    return {name: payload[name] for name in _BUILT_IN_INPUT if payload.get(name) is not None}


def detail(
    snap: Snapshot, tokens: GenerationTokens, estimated_remaining_sec: float | None = None
) -> dict[str, Any]:
    job = snap.job
    job_id = str(job.id)
    return {
        "id": job_id,
        "status": job.status,
        "job": job.job_name,
        "input": job_input(job),
        "provider": job.provider,
        "model": job.payload.get("model"),
        # The input, so a job opened on another device can show what was asked.
        "prompt": job.payload.get("prompt"),
        "max_tokens": job.payload.get("max_tokens"),
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        # When a queued job may start: its run_at or delay_s, or a scheduled retry.
        "run_at": _iso(job.run_after) if job.status == "queued" else None,
        "last_seq": job.last_seq,
        # Seconds until a queued or running job is done (server/estimates.py); null once it
        # has ended, or with nothing to go on.
        "estimated_remaining_sec": estimated_remaining_sec,
        "output": {"attempt": job.attempts, "text": snap.text},
        # The current attempt's last progress (fraction, message), for a page opened mid-run.
        "progress": snap.progress,
        "result": job.result,
        # What the tenant paid for the result, once: the accepted attempt's calls and the
        # journaled steps of earlier attempts it replayed (null until it succeeds).
        "charged_usd": str(job.charged_usd) if job.charged_usd is not None else None,
        "error": job.error,
        "cancel_requested": job.cancel_requested_at is not None,
        "metadata": job.metadata,
        # Retention: what the create asked for (null: the deployment's), and when the job will
        # be deleted, known once the janitor has settled it (JOBSTREAM_COMPACT_AFTER_S after
        # its end). Then its id answers 410 for a while, and 404.
        "retain_s": job.retain_s,
        "expires_at": _iso(job.expires_at),
        "attempt_history": [_attempt(a) for a in snap.attempts],
        **lineage(job),
        **links(job_id, tokens),
    }
