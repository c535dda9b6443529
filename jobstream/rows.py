"""Typed rows: a job as the repository (jobstream/jobs.py) hands it out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream.types import JobStatus


@dataclass(slots=True)
class JobRow:
    """A `jobs` row, less the columns only its attempt's worker reads (run_token, lease_until,
    the text offsets, uncounted_attempts). Read it, never set it: it is what the database said.

    Slotted, not frozen: a frozen __init__ sets each field through object.__setattr__, which made
    a row cost 7 µs to build instead of 1.2 µs, and POST /api/jobs/batch builds 1,000 a request.
    """

    id: uuid.UUID
    tenant_id: str
    idempotency_key: str | None
    request_hash: str
    status: JobStatus
    priority: int
    provider: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    attempts: int
    max_attempts: int
    worker_id: str | None
    run_after: datetime
    cancel_requested_at: datetime | None
    last_seq: int
    webhook_url: str | None
    estimate_usd: Decimal
    reserved_usd: Decimal
    charged_usd: Decimal | None
    retry_of: uuid.UUID | None
    retried_as: uuid.UUID | None
    retain_s: int | None
    expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @classmethod
    def of(cls, r: asyncpg.Record) -> JobRow:
        # By name, so a statement may return columns of its own beside the row's (`go`,
        # `pg_notify`). No checks: the schema made these values, and a batch builds 1,000 rows.
        return cls(
            r["id"], r["tenant_id"], r["idempotency_key"], r["request_hash"], r["status"],
            r["priority"], r["provider"], r["payload"], r["metadata"], r["result"], r["error"],
            r["attempts"], r["max_attempts"], r["worker_id"], r["run_after"],
            r["cancel_requested_at"], r["last_seq"], r["webhook_url"], r["estimate_usd"],
            r["reserved_usd"], r["charged_usd"], r["retry_of"], r["retried_as"], r["retain_s"],
            r["expires_at"], r["created_at"], r["started_at"], r["finished_at"], r["updated_at"],
        )  # fmt: skip
