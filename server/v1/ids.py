"""Response and output item ids: a job's id in the Responses API's spelling."""

from __future__ import annotations

import uuid

RESPONSE_PREFIX = "resp_"


def response_id(job_id: uuid.UUID) -> str:
    return f"{RESPONSE_PREFIX}{job_id.hex}"


def job_id(raw: str) -> uuid.UUID | None:
    """The job a response id names: `resp_<32 hex>`, or the job's own id as /api/jobs gives it
    (so one id works on both APIs). None for anything else."""
    try:
        return uuid.UUID(raw.removeprefix(RESPONSE_PREFIX))
    except ValueError:
        return None


def item_id(job_id: uuid.UUID, attempt: int) -> str:
    # One output item per attempt; the SDK's stream helper refuses two items with one id.
    return f"msg_{job_id.hex}_{attempt}"
