"""One exception tree for jobstream. Driver errors are translated at the boundary, cause kept."""

from __future__ import annotations

from jobstream.types import ErrorKind


class JobstreamError(Exception):
    """Base of every error jobstream raises on purpose."""


class DatabaseUnavailable(JobstreamError):
    """PostgreSQL could not be reached (start-up retries exhausted, or connection lost)."""


class JobNotFound(JobstreamError):
    """No such job for this tenant."""


class IdempotencyConflict(JobstreamError):
    """The Idempotency-Key was used before with a different request body."""


class RateLimited(JobstreamError):
    """The tenant created more jobs in the last minute than its create rate allows."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BudgetExceeded(JobstreamError):
    """The tenant's budget cannot cover the job's reservation."""


class StorageExceeded(JobstreamError):
    """The tenant's stored inputs would pass its storage bound (JOBSTREAM_TENANT_STORAGE_BYTES)."""

    def __init__(self, message: str, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


class KeyGone(JobstreamError):
    """The Idempotency-Key made a job that retention has deleted since; the key is remembered
    while the job's tombstone is kept, so it makes no second job."""

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class Fenced(JobstreamError):
    """A write by an attempt that no longer holds the job (stale run_token, or job not active).

    The attempt that sees this must stop: another attempt, or a cancel, owns the job now.
    """


class ProviderError(JobstreamError):
    """A provider call failed; `kind` decides what happens to the job.

    `request_sent` tells whether the provider may have started (and billed) the work: a failure
    after that point with no answer is an unknown outcome. `refused` is an error answer (an HTTP
    error status) before any work: the provider produced, and bills, nothing.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        request_sent: bool = True,
        refused: bool = False,
        pause_provider: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.retry_after_s = retry_after_s
        self.status_code = status_code
        self.request_sent = request_sent
        self.refused = refused
        # The provider said it is overloaded (Anthropic's 529): every worker backs off it, as
        # after a 429, though the kind stays transient.
        self.pause_provider = pause_provider
        # Which provider failed, set where a job's call is made (worker/llm_calls.py).
        self.provider: str | None = None

    @property
    def billed_nothing(self) -> bool:
        """Known to cost nothing: refused with an error status, or never sent."""
        return self.refused or not self.request_sent

    @property
    def error_class(self) -> str:
        return self.kind


class TransientError(JobstreamError):
    """Raise in a job to have it tried again later, with backoff, while attempts are left.

    `retry_after_s` is the least the next attempt waits (a service's Retry-After).
    """

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class PermanentError(JobstreamError):
    """Raise in a job to fail it now: no retry would do better (bad input, a refusal)."""

    error_class = "permanent"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OutputError(JobstreamError):
    """A model's answer (or a job's result) that cannot be the result: its `kind` has its own
    rule (worker/retry.py)."""

    kind: ErrorKind = "permanent"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidOutput(OutputError):
    """The answer, or the job's return value, fails its model. Retried within the job's
    invalid_output_retries; the next try sees the errors and the answer (ctx.previous_failure).
    """

    kind = "invalid_output"

    def __init__(self, message: str, answer: str | None = None) -> None:
        super().__init__(message)
        self.answer = answer  # the model's answer that failed, for the next try's re-ask


class OutputTruncated(OutputError):
    """The model stopped at its token limit: retried once with the limit doubled."""

    kind = "output_truncated"


class Refused(OutputError):
    """The model refused, or a content filter stopped it: final."""

    kind = "refused"


class BudgetRefused(ProviderError):
    """A `ctx.llm` call that could pass the job's `max_cost_usd`, refused before it was sent."""

    def __init__(self, message: str) -> None:
        super().__init__("permanent", message, request_sent=False, refused=True)

    @property
    def error_class(self) -> str:
        return "budget"
