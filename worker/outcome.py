"""Recording an attempt's one outcome: success, failure, cancel or hand-back, with what it cost.

The runner (worker/attempt.py) decides how the attempt ended and writes its last tokens; this
writes what that ending means for the job, in one fenced transaction (jobstream/attempts.py),
and logs the settling line. Each write retries a lost connection while the lease lasts.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import asyncpg
import structlog

from jobstream import attempts, db, pauses
from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker import retry
from jobstream.worker.coalescer import Coalescer
from jobstream.worker.failure import Failure
from jobstream.worker.inbox import CancelRequested, Interrupted, StreamEnded, StreamFailed
from jobstream.worker.lease import Lease
from jobstream.worker.previous import Previous
from jobstream.worker.spend import Spend

# The attempt's logger: its settling line is one of its two status lines (with
# `attempt_started`), and log filters select an attempt's lines by this name.
log = structlog.get_logger("worker.attempt")

T = TypeVar("T")

# Writes an attempt's success; raises Fenced when the attempt no longer holds its job.
SuccessWriter = Callable[[attempts.Success], Awaitable[None]]

# What became of the attempt, from this worker's point of view.
AttemptResult = Literal[
    "succeeded",
    "retry",  # failed; the job is queued for another attempt
    "failed",
    "dead",
    "cancelled",
    "interrupted",  # handed back at shutdown
    "fenced",  # another attempt, a cancel or the reaper owned the job: nothing recorded
    "abandoned",  # the database stayed away past the lease: the reaper will settle the job
]

_RESULT_OF_ACTION: dict[attempts.FailureAction, AttemptResult] = {
    "retry": "retry",
    "fail": "failed",
    "dead": "dead",
}
_STATUS_AFTER: dict[attempts.FailureAction, str] = {
    "retry": "queued",
    "fail": "failed",
    "dead": "dead",
}


def _usage_fields(usage: Usage) -> dict[str, object]:
    """What an attempt used and cost, for its settling log line."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": str(usage.cost_usd),
        "cost_known": usage.cost_known,
    }


class LeaseExpired(Exception):
    """A write could not reach the database before the lease ran out."""


class OutcomeRecorder:
    """Writes the outcome of one attempt; its runner builds it and calls it once, as it settles.

    What the attempt's calls used is read from its Spend, and whether the provider stopped for
    us is passed in (the calls have stopped by then); what the attempt produced is read from the
    runner's coalescer, so that the output text is joined only for a success.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random,
        spend: Spend,
        previous: Previous,
        lease: Lease,
        produced: Coalescer,
        write_success: SuccessWriter | None = None,
    ) -> None:
        self._pool = pool
        self._held = held
        self._settings = settings
        self._clock = clock
        self._rng = rng
        self._spend = spend
        self._previous = previous
        self._lease = lease  # its deadline bounds how long a write retries
        self._produced = produced
        # The worker's group writer (worker/completions.py), or a statement of our own.
        self._write_success: SuccessWriter = write_success or (
            lambda success: attempts.accept(pool, success, clock)
        )

    async def record(
        self,
        ending: StreamEnded | StreamFailed | CancelRequested | Interrupted,
        last_chunk: str,
        *,
        provider_stopped: bool,
        text_at: int = 0,
    ) -> AttemptResult:
        """Write the outcome of `ending`; a success appends `last_chunk` at `text_at`."""
        match ending:
            case StreamEnded(output=output):
                return await self._succeed(last_chunk, output, text_at)
            case StreamFailed(failure=failure):
                return await self._fail(failure)
            case CancelRequested():
                return await self.confirm_cancel(provider_stopped=provider_stopped)
            case Interrupted():
                return await self._hand_back()

    async def _succeed(self, last_chunk: str, output: object, text_at: int) -> AttemptResult:
        usage = self._spend.total()
        text = self._produced.output
        # Steps journaled by earlier attempts and replayed here are part of the result: the
        # tenant pays for them once, now (their attempts' rows already record their cost).
        replayed = self._spend.replayed_usd
        charge = usage.cost_usd + replayed if replayed else None
        success = attempts.Success(
            self._held, text, usage, last_chunk, output, charge, text_at=text_at
        )
        await self.persist(lambda: self._write_success(success))
        log.info("attempt_succeeded", status="succeeded", **_usage_fields(usage))
        return "succeeded"

    async def _fail(self, failure: Failure) -> AttemptResult:
        held = self._held
        decision = retry.decide(
            failure.kind,
            retry_after_s=failure.retry_after_s,
            retry_unknown=held.spec.retry_unknown,
            exhausted=held.exhausted,
            attempt=held.counted_attempts,
            backoff=retry.Backoff(self._settings.backoff_base_s, self._settings.backoff_max_s),
            rng=self._rng,
            output_retry_left=await self._output_retry_left(failure.kind),
        )
        if failure.kind == "rate_limited" or failure.pause_provider:
            # Every worker backs off, for as long as the provider asked, or when it did not say,
            # for as long as this job waits.
            pause_s = failure.retry_after_s
            if pause_s is None:
                pause_s = decision.delay_s
            if pause_s > 0:
                await self._pause_provider(failure.provider or held.provider, pause_s)
        # Refused before any work, or never sent: the provider billed nothing. Otherwise it may
        # have (a stream that broke, or a known failure after output), and unless it told us the
        # usage we only have our estimate.
        usage = self._spend.total(refused_call_billed_nothing=failure.billed_nothing)
        await self.persist(
            lambda: attempts.fail(
                self._pool,
                held,
                action=decision.action,
                outcome=decision.outcome,
                error=failure.to_json(),
                usage=usage,
                retry_in_s=decision.delay_s,
                clock=self._clock,
                trace=failure.trace,
                counted=decision.counted,
            )
        )
        log.info(
            "attempt_failed",
            status=_STATUS_AFTER[decision.action],
            error_class=failure.error_class,
            error=failure.message,
            outcome=decision.outcome,
            retry_in_s=round(decision.delay_s, 3),
            **_usage_fields(usage),
        )
        return _RESULT_OF_ACTION[decision.action]

    async def _output_retry_left(self, kind: str) -> bool:
        """An output kind's budget has a try left: invalid_output_retries for an invalid
        answer, one for a truncated one. Other kinds: no budget of their own."""
        if kind == "invalid_output":
            budget = self._held.spec.invalid_output_retries
        elif kind == "output_truncated":
            budget = 1
        else:
            return False
        try:
            return await self._previous.count(kind) < budget
        except db.DISCONNECTS:
            return False  # the budget unknown: fail rather than retry past it

    async def _pause_provider(self, provider: str, seconds: float) -> None:
        # Before the requeue's NOTIFY wakes other workers, so that they see the pause.
        try:
            until = await pauses.pause(self._pool, provider, seconds, self._clock)
        except db.DISCONNECTS as exc:
            # The job's own retry still waits out Retry-After; only the others may hit the 429.
            log.warning("provider_pause_failed", error=str(exc) or type(exc).__name__)
            return
        log.info("provider_paused", provider=provider, until=until.isoformat())

    async def confirm_cancel(self, *, provider_stopped: bool) -> AttemptResult:
        """Settle the job as cancelled (it is `cancelling` under our run token)."""
        usage = self._spend.total()
        await self.persist(
            lambda: attempts.confirm_cancel(
                self._pool,
                self._held,
                usage,
                self._clock,
                provider_confirmed=provider_stopped,
            )
        )
        log.info(
            "attempt_cancelled",
            status="cancelled",
            provider_confirmed=provider_stopped,
            **_usage_fields(usage),
        )
        return "cancelled"

    async def _hand_back(self) -> AttemptResult:
        usage = self._spend.total()
        await self.persist(lambda: attempts.hand_back(self._pool, self._held, usage, self._clock))
        log.info("attempt_handed_back", status="queued", **_usage_fields(usage))
        return "interrupted"

    async def persist(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run a fenced write, retrying a lost connection for as long as the lease lasts.

        A retry is safe: if the first try did commit, the fence refuses the second (Fenced).
        """
        loop = asyncio.get_running_loop()
        delay = 0.1
        while True:
            try:
                return await write()
            except db.DISCONNECTS as exc:
                if loop.time() + delay >= self._lease.deadline:
                    raise LeaseExpired(f"database unreachable: {exc}") from exc
                log.warning("write_failed", error=str(exc) or type(exc).__name__, retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
