"""A job as a create asks for it (NewJob), what became of it (Created, or a Refusal), and the
jobs as INSERT_JOBS takes them (jobstream/creates.py writes them)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import orjson

from jobstream.errors import (
    BudgetExceeded,
    IdempotencyConflict,
    KeyGone,
    RateLimited,
    StorageExceeded,
)
from jobstream.jobspec import JobSpec
from jobstream.rows import JobRow

_NOTHING = Decimal(0)
_USD_STEP = Decimal("1e-8")


@dataclass(frozen=True)
class Created:
    job: JobRow
    created: bool  # False: an earlier request with the same key and body made it


# A request hash of what the client sent starts with this; one without it is of the stored
# spec, defaults filled in (schema version 14 and before: jobs.request_hash says more).
SENT_HASH = "sent:"


def sent_hash(body: Mapping[str, Any]) -> str:
    """The hash of a create's body as the client sent it, canonicalised: keys sorted, no
    whitespace. Not the job as validated: a default the server fills in (a timeout that a
    release raised) is not part of it, so a keyed create repeated across an upgrade finds its
    job instead of a 409. Numbers keep their form (1 and 1.0 differ, as the client sent them)."""
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return SENT_HASH + hashlib.sha256(canonical).hexdigest()


class NewJob:
    """One job to create: what it asks for, its idempotency key, and what to reserve for it.

    A plain class with slots, not a frozen dataclass: a batch makes a thousand of these, and a
    frozen __init__ (object.__setattr__ per field, then __post_init__'s) cost 1 µs more each."""

    __slots__ = (
        "idempotency_key", "input_bytes", "payload", "request_hash", "reserved_usd", "spec",
        "traceparent",
    )  # fmt: skip

    def __init__(
        self,
        spec: JobSpec,
        idempotency_key: str | None = None,
        reserved_usd: Decimal = _NOTHING,
        *,
        sent: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> None:
        self.spec = spec
        # The create's trace context (W3C traceparent), stored with the job so that the worker's
        # spans continue the create's trace in another process; None when nothing traces it.
        self.traceparent = traceparent
        self.idempotency_key = idempotency_key
        # As jobs.reserved_usd (numeric(18, 8), which rounds half away from zero) will hold it:
        # the budget check, the insert and the answer all use the stored amount.
        self.reserved_usd = reserved_usd.quantize(_USD_STEP, ROUND_HALF_UP)
        # Same key + same hash = the same job. Only a key's replay ever compares it: an unkeyed
        # item stores '' and skips the digest (2 µs of the server's 25 an item in a batch).
        # `sent`: the body the client sent (the API's creates); without it (a job made in
        # Python), the spec's own hash.
        self.request_hash = (
            ""
            if idempotency_key is None
            else sent_hash(sent)
            if sent is not None
            else spec.request_hash()
        )
        # What jobs.payload stores: built once, for the insert and for the answer's row.
        self.payload = spec.payload()
        # What the tenant's storage bound counts: the input as stored, encoded once here.
        self.input_bytes = len(orjson.dumps(self.payload)) + len(orjson.dumps(spec.metadata))

    def same_request(self, stored_hash: str) -> bool:
        """Whether the job or tombstone with `stored_hash` was made by this very request."""
        if stored_hash.startswith(SENT_HASH) or not self.request_hash.startswith(SENT_HASH):
            return stored_hash == self.request_hash
        # Made before hashes were of what was sent: compare as it was then.
        return stored_hash == self.spec.request_hash()


# Why an item of a create was refused. Returned, not raised, by create_many: in a batch, a
# refused item refuses that item alone.
Refusal = IdempotencyConflict | BudgetExceeded | RateLimited | StorageExceeded | KeyGone


def insert_args(
    ids: Sequence[str],
    tenant_id: str,
    items: Sequence[NewJob],
    now: datetime | None,
    *,
    locked: bool = False,
    book: bool = True,
    storage_bytes: int | None = None,
) -> list[Any]:
    """INSERT_JOBS' parameters: the jobs as one JSON array, the tenant, now, whether the
    statement must leave a tenant with limits to the locked path (not when it is that path),
    whether it books the jobs' reservations, the tenant's storage bound and what the jobs add
    to its measure."""
    pairs = enumerate(zip(ids, items, strict=True))
    rows = [_insert_row(i, job_id, item) for i, (job_id, item) in pairs]
    added = sum(item.input_bytes for item in items)
    return [rows, tenant_id, now, not locked, book, storage_bytes, added]


def _insert_row(ordinal: int, job_id: str, item: NewJob) -> list[Any]:
    """One element of INSERT_JOBS' $1: the job's fields at the places the statement reads them
    from (`item`: ord, id, key, hash, provider, priority, payload, metadata, max_attempts,
    webhook_url, estimate, run_at, delay_s, retain_s, job_name, input_bytes, traceparent)."""
    spec = item.spec
    return [
        ordinal, job_id, item.idempotency_key, item.request_hash, spec.provider, spec.priority,
        item.payload, spec.metadata, spec.max_attempts, spec.webhook_url,
        str(item.reserved_usd),  # exact: a JSON number would pass through a float
        _utc(spec.run_at), spec.delay_s, spec.retain_s, spec.job_name, item.input_bytes,
        item.traceparent,
    ]  # fmt: skip


def _utc(moment: datetime | None) -> datetime | None:
    """`moment` in UTC, as asyncpg sends a timestamptz: an RFC 3339 offset may be up to 23:59,
    PostgreSQL's text input takes at most 15:59 (a fuzzed +19:32 was a 500)."""
    return moment.astimezone(UTC) if moment is not None else None
