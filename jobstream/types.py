"""The closed vocabularies of the data model: statuses, outcomes, event and error kinds."""

from __future__ import annotations

from typing import Final, Literal, get_args

JobStatus = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled", "dead"]
JOB_STATUSES: Final[tuple[JobStatus, ...]] = get_args(JobStatus)
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled", "dead"})
# A job an attempt holds: it has a run_token and a lease.
ACTIVE_STATUSES: Final[frozenset[str]] = frozenset({"running", "cancelling"})

AttemptOutcome = Literal[
    "running", "succeeded", "failed", "unknown", "cancelled", "lost", "interrupted"
]

# `attempt_error`, not `error`: EventSource fires its own `error` for connection trouble, and a
# server event of that name would reach the same listeners.
EventType = Literal["status", "reset", "token", "usage", "result", "attempt_error", "done"]

# How a provider failure is treated (DESIGN.md §7).
ErrorKind = Literal["rate_limited", "transient", "permanent", "unknown"]
