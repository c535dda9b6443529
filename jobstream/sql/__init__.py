"""Every SQL statement jobstream runs: named blocks in this package's `.sql` files, one file per
part that runs them, read once at import into `queries`, whose attributes mypy checks.

A block is a `-- name: NAME` line, then its comment lines (why it is so; not sent), then the
statement exactly as PostgreSQL runs it. Nothing is formatted in: values are bound parameters,
and channel names, statuses and histogram bounds are spelt out (tests/unit/test_sql_literals.py
keeps them in step with Python's). A "now" parameter is a `timestamptz` that may be NULL, spelt
`coalesce($n::timestamptz, statement_timestamp())`: NULL means the database clock, which
production uses so that no two hosts' clocks disagree about a lease; tests pass an injected time
(jobstream/clock.py). `statement_timestamp()` is stable within a statement, so `run_after <= now`
can bound an index scan; `clock_timestamp()` is volatile, which made every such test a filter
applied to every queued row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from importlib import resources
from typing import Final

# A block's header: its name, then the comment lines that document it.
_HEADER = re.compile(r"^-- name: (\w+)\n(?:--.*\n)*", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Queries:
    """One attribute per block, named as the block is; grouped by file."""

    # attempts.sql
    ADMIN_COUNTS: str
    ADMIN_PROVIDERS: str
    ADMIN_WINDOW_FLOOR: str
    ADMIN_JOBS_PAGE: str
    ADMIN_FAILED_PAGE: str
    ADMIN_JOB: str
    ADMIN_ATTEMPTS: str
    ADMIN_TIMELINE: str
    ADMIN_DELIVERIES: str
    ADMIN_JOB_TENANT: str
    ADMIN_DEAD: str
    ADMIN_WORKERS: str
    ADMIN_RUNNING_ATTEMPTS: str
    SUCCEED_ATTEMPTS: str
    REQUEUE_JOB: str
    FAIL_JOB: str
    CONFIRM_CANCEL: str
    FINISH_ATTEMPT: str
    EARLIER_ATTEMPTS_COST: str
    JOURNAL_STEPS: str
    JOB_STEPS: str
    PREVIOUS_ATTEMPTS: str
    # chats.sql
    CHAT_LATEST_JOB: str
    # claiming.sql
    CLAIM_JOBS: str
    PAUSE_PROVIDER: str
    # connections.sql
    PING: str
    LOCK_SCHEMA: str
    HAS_SCHEMA: str
    SCHEMA_VERSION: str
    RECORD_SCHEMA_VERSION: str
    # creating.sql
    INSERT_JOBS: str
    BOOK_RESERVED: str
    NOTIFY_RUNNABLE: str
    SELECT_JOBS_BY_KEYS: str
    TOMBSTONES_BY_KEYS: str
    TENANT_FOR_CREATE: str
    TENANT_BUDGET_LEFT: str
    TENANT_RECENT_CREATES: str
    # events.sql
    APPEND_EVENTS: str
    NOTIFY_EVENTS: str
    EVENTS_AFTER: str
    EVENTS_AFTER_MANY: str
    JOB_PROGRESS: str
    JOB_PROGRESS_BY_TOKEN: str
    JOB_LAST_SEQ: str
    LAST_PROGRESS: str
    JOBS_LAST_SEQ: str
    # estimates.sql
    ESTIMATE_INPUTS: str
    # janitor.sql
    TRY_LOCK: str
    UNLOCK: str
    JANITOR_TRANSACTION: str
    SETTLE_JOBS: str
    DELETE_EXPIRED_JOBS: str
    PRUNE_TOMBSTONES: str
    PRUNE_WORKERS: str
    TOMBSTONE: str
    FOLD_METRIC_TOTALS: str
    # jobs.sql
    SELECT_JOB: str
    SELECT_JOB_FOR_UPDATE: str
    SELECT_ATTEMPTS: str
    LIST_JOBS: str
    CANCEL_QUEUED: str
    REQUEST_CANCEL_RUNNING: str
    RETRY_DEAD: str
    DELETE_FINISHED_JOB: str
    # leases.sql
    RENEW_LEASES: str
    SELECT_EXPIRED: str
    # ledger.sql
    RELEASE_RESERVATION: str
    # metrics.sql
    METRICS_TOTALS: str
    METRICS_LIVE: str
    METRICS_ATTEMPTS_RUNNING: str
    METRICS_PROVIDER_PAUSES: str
    METRICS_JANITOR_LAG: str
    # tenants.sql
    FOLD_METRIC_MINUTE: str
    FOLD_ATTEMPT_MINUTES: str
    CURRENT_MINUTE: str
    LAST_ATTEMPT_MINUTE: str
    PRUNE_METRIC_MINUTES: str
    PRUNE_ATTEMPT_MINUTES: str
    SERIES_MINUTES: str
    SERIES_FAILED: str
    SERIES_SPEND: str
    INSERT_TENANT: str
    TENANT_BY_KEY_HASH: str
    TENANT_KEY_GENERATION: str
    ROTATE_KEY: str
    REVOKE_KEY: str
    # tokens.sql
    APPEND_TOKENS_MANY: str
    ATTEMPT_TEXT_WRITTEN: str
    ATTEMPT_TEXT: str
    # webhooks.sql
    INSERT_WEBHOOK_DELIVERY: str
    CLAIM_WEBHOOK_DELIVERIES: str
    ENSURE_WEBHOOK_SECRET: str
    MARK_WEBHOOK_DELIVERED: str
    MARK_WEBHOOK_FAILED_TRY: str
    # workers.sql
    REGISTER_WORKER: str
    WORKER_HEARTBEAT: str
    WORKER_STOPPED: str


def parse(text: str) -> dict[str, str]:
    """A file's blocks, name to statement (the text before the first block is the file's notes)."""
    parts = _HEADER.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load() -> Queries:
    """Every block of every file, each name once, each with its attribute."""
    blocks: dict[str, str] = {}
    for file in sorted(resources.files(__name__).iterdir(), key=lambda f: f.name):
        if file.name.endswith(".sql"):
            for name, statement in parse(file.read_text(encoding="utf-8")).items():
                if name in blocks:
                    raise ValueError(f"{file.name}: block {name} is defined twice")
                blocks[name] = statement
    declared = {f.name for f in fields(Queries)}
    if blocks.keys() != declared:
        raise ValueError(
            f"blocks without an attribute: {sorted(blocks.keys() - declared)}; "
            f"attributes without a block: {sorted(declared - blocks.keys())}"
        )
    return Queries(**blocks)


queries: Final = load()
