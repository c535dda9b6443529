"""Typed rows: a job and its attempts as the repository (jobstream/creates.py, jobs.py,
job_reads.py) hands them out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream.jobspec import JobSpec
from jobstream.prices import PriceSource
from jobstream.types import AttemptOutcome, JobStatus


@dataclass(slots=True)
class JobRow:
    """A `jobs` row, less the columns only its attempt's worker reads (run_token, lease_until,
    the text offsets, uncounted_attempts). Read it, never set it: it is what the database holds
    (a job just created is built from what its insert wrote and returned: `inserted`).

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
    job_name: str  # `llm`: the built-in job; else an `@app.job` of the deployment's app

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
            r["job_name"],
        )  # fmt: skip

    @classmethod
    def inserted(
        cls,
        r: asyncpg.Record,
        tenant_id: str,
        idempotency_key: str | None,
        request_hash: str,
        payload: dict[str, Any],
        spec: JobSpec,
        reserved_usd: Decimal,
    ) -> JobRow:
        """A job just created: the times INSERT_JOBS returned of it (what the database set), and
        the rest as the insert wrote it: queued, its log at seq 1, `reserved_usd` (already as
        numeric(18, 8) holds it) reserved. tests/integration/test_created_rows.py holds it equal
        to the stored row."""
        created_at = r["created_at"]
        return cls(
            r["id"], tenant_id, idempotency_key, request_hash, "queued", spec.priority,
            spec.provider, payload, spec.metadata, None, None, 0, spec.max_attempts, None,
            r["run_after"], None, 1, spec.webhook_url, reserved_usd, reserved_usd, None, None,
            None, spec.retain_s, None, created_at, None, None, created_at, spec.job_name,
        )  # fmt: skip


@dataclass(slots=True)
class AttemptRow:
    """A `job_attempts` row as the API shows it (queries.SELECT_ATTEMPTS): one provider call,
    its outcome and what it cost. Read it, never set it."""

    attempt: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome
    error_class: str | None
    error_detail: str | None
    provider: str
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: Decimal | None
    cost_known: bool  # false: the outcome is unknown and cost_usd is our estimate
    price_source: PriceSource | None  # how cost_usd's price was found (jobstream/prices.py)
    cancel_confirmed: bool | None  # a cancelled attempt: did the provider confirm it stopped?

    @classmethod
    def of(cls, r: asyncpg.Record) -> AttemptRow:
        return cls(
            r["attempt"], r["worker_id"], r["started_at"], r["finished_at"], r["outcome"],
            r["error_class"], r["error_detail"], r["provider"], r["model"], r["input_tokens"],
            r["output_tokens"], r["cost_usd"], r["cost_known"], r["price_source"],
            r["cancel_confirmed"],
        )  # fmt: skip
