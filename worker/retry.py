"""What happens to a job after a failed attempt: retry later, fail, or give up as dead.

Pure functions of the failure and the job's policy (docs/design.md, "Errors and retries");
randomness is injected so that tests pin the jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from jobstream.attempts import FailureAction
from jobstream.types import ErrorKind

FailedOutcome = Literal["failed", "unknown"]

# 2**30 times any sane base is far past any cap; beyond it the float would only overflow.
_MAX_DOUBLINGS = 30


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: a uniform delay in [0, min(max, base * 2**(n-1))].

    Full jitter spreads the retries of jobs that failed together (one provider outage) instead of
    bringing them back in a synchronised wave.
    """

    base_s: float
    max_s: float

    def ceiling(self, attempt: int) -> float:
        """The largest delay after the `attempt`-th counted attempt failed (1-based)."""
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        return min(self.max_s, self.base_s * 2.0**doublings)

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, self.ceiling(attempt))


@dataclass(frozen=True)
class Decision:
    action: FailureAction
    # The attempt's own outcome: "unknown" when the provider may have done (and billed) the work.
    outcome: FailedOutcome
    # Seconds until the retry may run; 0 unless action is "retry".
    delay_s: float
    # Counts against max_attempts: not a retry of the output kinds, which have budgets of their
    # own (the attempt ran; its answer was unusable).
    counted: bool = True


def outcome_of(kind: ErrorKind) -> FailedOutcome:
    return "unknown" if kind == "unknown" else "failed"


def decide(
    kind: ErrorKind,
    *,
    retry_after_s: float | None,
    retry_unknown: bool,
    exhausted: bool,
    attempt: int,
    backoff: Backoff,
    rng: random.Random,
    output_retry_left: bool = False,
) -> Decision:
    """The fate of a job whose attempt failed with an error of `kind`.

    `attempt` is the counted attempt number (handed-back attempts excluded) and drives the
    backoff; `exhausted` says no counted attempt is left. `retry_after_s` (a provider's
    Retry-After, on a 429 or a 503) is a floor under the jittered delay. `output_retry_left`
    says the budget of an output kind (invalid_output, output_truncated) has a try left.
    """
    outcome = outcome_of(kind)
    match kind:
        case "permanent" | "refused":
            return Decision("fail", outcome, 0.0)
        case "invalid_output" | "output_truncated":
            # At once, and beside max_attempts: the next try is asked differently (the errors
            # appended, or a larger limit), not later.
            if output_retry_left:
                return Decision("retry", outcome, 0.0, counted=False)
            return Decision("fail", outcome, 0.0)
        case "unknown" if not retry_unknown:
            # The provider may have done the work: running it again could do it twice.
            return Decision("fail", outcome, 0.0)
        case "rate_limited" | "transient" | "unknown" | "error":
            if exhausted:
                return Decision("dead", outcome, 0.0)
            delay = backoff.delay(attempt, rng)
            if retry_after_s is not None:
                delay = max(delay, retry_after_s)
            return Decision("retry", outcome, delay)
