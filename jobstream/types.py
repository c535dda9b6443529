"""The closed vocabularies of the data model: statuses, outcomes, event and error kinds, and the
histograms' bounds."""

from __future__ import annotations

from typing import Final, Literal, get_args

JobStatus = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled", "dead"]
JOB_STATUSES: Final[tuple[JobStatus, ...]] = get_args(JobStatus)
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled", "dead"})
# A job an attempt holds: it has a run_token and a lease. The SQL spells this and
# TERMINAL_STATUSES out as `status IN (...)` lists (tests/unit/test_sql_literals.py checks them).
ACTIVE_STATUSES: Final[frozenset[str]] = frozenset({"running", "cancelling"})
# The jobs that ended without a result for want of one (not cancelled): what jobs_failed_idx
# holds, the operator's dead letters (SQL spells them `status IN ('failed', 'dead')`).
FAILED_STATUSES: Final[frozenset[str]] = frozenset({"failed", "dead"})

# The duration histograms' bounds, seconds: metric_totals' *_counts arrays hold one cumulative
# count per bound, the statements that count spell them out (jobstream/sql/metrics.sql), and
# /metrics renders them. LLM calls are long, so the histograms reach ten minutes.
DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
)  # fmt: skip

AttemptOutcome = Literal[
    "running", "succeeded", "failed", "unknown", "cancelled", "lost", "interrupted"
]

# `attempt_error`, not `error`: EventSource fires its own `error` for connection trouble, and a
# server event of that name would reach the same listeners.
EventType = Literal["status", "reset", "token", "progress", "usage", "attempt_error", "done"]

# How a failure is treated (docs/design.md, "Errors and retries"): a provider's, or `error`, an
# unexpected exception in a job's own code (retried with backoff, as a transient fault, while
# attempts are left).
# The output kinds: `invalid_output` (a reply or result that fails its model: retried within
# its own budget, invalid_output_retries), `output_truncated` (the model stopped at its token
# limit: one retry with the limit doubled) and `refused` (a refusal or content filter: final).
ErrorKind = Literal[
    "rate_limited", "transient", "permanent", "unknown", "error", "invalid_output",
    "output_truncated", "refused",
]  # fmt: skip
