"""A failed attempt, described the one way the runner records it, whatever raised."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from jobstream.errors import (
    InvalidOutput,
    OutputError,
    PermanentError,
    ProviderError,
    TransientError,
)
from jobstream.types import ErrorKind


@dataclass(frozen=True)
class Failure:
    kind: ErrorKind  # decides retry or not
    error_class: str  # what clients and operators see in `error.class`
    message: str
    retry_after_s: float | None = None
    # Known to have cost nothing (refused with an error status, or never sent): the attempt's
    # cost is then a known zero rather than our estimate.
    billed_nothing: bool = False
    # The traceback of an exception the job's own code raised, or the answer that failed its
    # model: the attempt's row keeps it for operators; the job's public error has only the
    # class and message.
    trace: str | None = None
    # The provider that failed, when a 429 is to pause it (a job's calls may use several).
    provider: str | None = None
    # Pause the provider for every worker as a 429 does, whatever the kind (an overload).
    pause_provider: bool = False

    @classmethod
    def from_provider(cls, exc: ProviderError) -> Failure:
        return cls(
            exc.kind,
            exc.error_class,
            exc.message,
            exc.retry_after_s,
            exc.billed_nothing,
            provider=exc.provider,
            pause_provider=exc.pause_provider,
        )

    @classmethod
    def timed_out(cls, timeout_s: float, *, request_sent: bool) -> Failure:
        message = f"no complete answer within the {timeout_s:g} s limit"
        if not request_sent:
            # Still connecting (or waiting for a pooled connection): the provider never saw the
            # request, so a retry is safe and the attempt cost nothing.
            return cls("transient", "timeout", message + " (request not sent)", billed_nothing=True)
        # After the request went out, silence says nothing about whether the provider did the
        # work: the outcome is unknown.
        return cls("unknown", "timeout", message)

    @classmethod
    def internal(cls, exc: BaseException) -> Failure:
        # A bug of ours, not the provider's verdict: retried like a transient fault, labelled
        # so that nobody mistakes it for a provider outage.
        return cls("transient", "internal", f"{type(exc).__name__}: {exc}")

    @classmethod
    def of_handler(cls, exc: Exception) -> Failure:
        """What a job's own code raised: its kind by what it chose to raise, anything else
        an `error` (retried with backoff while attempts are left)."""
        if isinstance(exc, ProviderError):
            return cls.from_provider(exc)
        if isinstance(exc, TransientError):
            return cls("transient", "transient", exc.message, exc.retry_after_s)
        if isinstance(exc, PermanentError):
            return cls("permanent", exc.error_class, exc.message)
        if isinstance(exc, InvalidOutput):
            # The answer that failed is kept with the attempt (operators only), for the re-ask.
            return cls(exc.kind, exc.kind, exc.message, trace=exc.answer)
        if isinstance(exc, OutputError):
            return cls(exc.kind, exc.kind, exc.message)
        trace = "".join(traceback.format_exception(exc))
        return cls("error", type(exc).__name__, str(exc) or type(exc).__name__, trace=trace)

    def to_json(self) -> dict[str, Any]:
        return {"class": self.error_class, "message": self.message}
