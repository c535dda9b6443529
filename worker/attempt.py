"""One attempt at a job: stream from the provider, persist the tokens, settle the outcome.

Three sources feed one inbox: the provider pump (deltas, then the end or the failure), the
worker's lease renewals (a cancel request, or the lease lost; worker/lease.py) and the worker
(shutdown). The runner's loop is the only writer: it coalesces deltas into flushes and, at the
first ending, stops the pump, leaves the lease renewals and
records exactly one outcome, flushing first so that the log holds every token before the status
changes (DESIGN.md §5).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Literal, TypeVar

import asyncpg
import structlog

from jobstream import attempts, db, pauses
from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.errors import Fenced, ProviderError
from jobstream.settings import Settings
from jobstream.usage import Usage
from worker import retry
from worker.coalescer import Coalescer
from worker.failure import Failure
from worker.inbox import (
    CancelRequested,
    Ending,
    Inbox,
    Interrupted,
    LeaseLost,
    StreamEnded,
    StreamFailed,
)
from worker.lease import Lease, Leases
from worker.providers.base import Provider, ProviderRequest, TextDelta
from worker.token_log import AppendWriter, TokenLog

log = structlog.get_logger(__name__)

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


class AttemptRunner:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        provider: Provider,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random,
        leases: Leases,
        claimed_at: float,
        write_success: SuccessWriter | None = None,
        write_tokens: AppendWriter | None = None,
    ) -> None:
        self.held = held
        self._pool = pool
        self._provider = provider
        self._settings = settings
        self._clock = clock
        self._rng = rng
        # The worker's group writer (worker/completions.py), or a statement of our own.
        self._write_success: SuccessWriter = write_success or (
            lambda success: attempts.accept(pool, success, clock)
        )
        self._inbox = Inbox()
        self._coalescer = Coalescer(
            interval_s=settings.flush_interval_s, max_bytes=settings.flush_bytes
        )
        # The worker's group writer (worker/token_writes.py), or a statement of our own.
        self._tokens = TokenLog(pool, held, writer=write_tokens)
        # Renewed with the worker's other attempts' from now on, until the stream ends.
        self._lease: Lease = leases.hold(held, self._inbox, claimed_at=claimed_at)
        spec = held.spec
        self._request = ProviderRequest(
            prompt=spec.prompt,
            model=spec.model,
            max_tokens=spec.max_tokens,
            attempt=held.attempt,
            simulate=spec.simulate,
            messages=spec.messages,
            instructions=spec.instructions,
            sampling=spec.sampling,
        )
        self._usage: Usage | None = None  # the provider's own, once it sends it
        self._provider_stopped = False  # we cancelled the stream and it closed cleanly
        # The outcome write, shielded from cancellation; kept so that a worker that had to
        # cancel this runner can still wait for the write to land.
        self.settling: asyncio.Task[AttemptResult] | None = None

    # --- signals from the worker ---

    def check_job(self) -> None:
        """Look at the job row now (a cancel NOTIFY arrived): renew the lease at once."""
        self._lease.check_now()

    def interrupt(self) -> None:
        """Stop and hand the job back to the queue (graceful shutdown)."""
        self._inbox.put_nowait(Interrupted())

    # --- the attempt ---

    async def run(self) -> AttemptResult:
        """Run the attempt to its one outcome. The caller binds the attempt's log context (job
        id, attempt, run token): the worker runs each attempt in a task of its own context."""
        held = self.held
        # One log line per change of the job's status: this one, and the settling one.
        log.info("attempt_started", status="running", provider=held.provider, model=held.spec.model)
        try:
            ending = await self._consume()
        except Exception as exc:
            # A bug of ours between stream and database: retried like a transient fault.
            log.exception("attempt_loop_crashed")
            ending = StreamFailed(Failure.internal(exc))
        except asyncio.CancelledError:
            # A hard stop (the worker's hand-back window is over, or the loop is closing):
            # still hand the job back rather than leave it to lease expiry.
            await self._settle_shielded(Interrupted())
            raise
        return await self._settle_shielded(ending)

    async def _consume(self) -> Ending:
        """Run the stream until the first ending; flush deltas on the way."""
        loop = asyncio.get_running_loop()
        name = f"{self.held.job_id}:{self.held.attempt}"
        pump = asyncio.create_task(self._pump(), name=f"provider-stream:{name}")
        coalescer = self._coalescer
        # The attempt's time limit is a deadline of this loop's, not a timer in the pump: the
        # runner ends the attempt, then stops the stream (one timer less per attempt).
        give_up_at = loop.time() + self.held.spec.timeout_s
        try:
            while True:
                # Everything that arrived since the last look, at once; nothing by the time the
                # oldest pending delta has waited long enough means flush it.
                due_at = coalescer.due_at
                messages = await self._inbox.take(
                    give_up_at if due_at is None else min(due_at, give_up_at)
                )
                now = loop.time()
                flush = not messages
                for message in messages:
                    if not isinstance(message, TextDelta):
                        return message  # its pending deltas are written as it settles
                    flush = coalescer.add(message.text, now) or flush
                if now >= give_up_at:
                    return self._timed_out()
                # One write for all that is due, however many chunks (events of at most
                # flush_bytes each) it holds.
                if flush and not await self._flushed():
                    return LeaseLost("a token write was refused: the job moved on")
        finally:
            self._lease.release()
            await self._stop(pump)

    async def _pump(self) -> None:
        """Move the provider's stream into the inbox; its end or failure is the last message."""
        stream = self._provider.stream(self._request)
        ending: Ending = StreamEnded()
        try:
            async for item in stream:
                if isinstance(item, Usage):
                    self._usage = item
                elif "\x00" in item.text:
                    # PostgreSQL's jsonb cannot hold U+0000: every flush of this text failed and
                    # the job was retried to death, paying the provider each time. Replaced
                    # once, here, so that the log and the result agree.
                    self._inbox.put_nowait(TextDelta(item.text.replace("\x00", "\ufffd")))
                else:
                    self._inbox.put_nowait(item)
        except ProviderError as exc:
            ending = StreamFailed(Failure.from_provider(exc))
        except TimeoutError:
            # A timeout of the provider's own making counts as the attempt's.
            ending = self._timed_out()
        except Exception as exc:
            log.exception("provider_stream_crashed")
            ending = StreamFailed(Failure.internal(exc))
        finally:
            await _close(stream)
        # Always posted (unless we were cancelled): the runner's loop waits for it.
        self._inbox.put_nowait(ending)

    def _timed_out(self) -> StreamFailed:
        sent = self._request.send_mark.sent
        return StreamFailed(Failure.timed_out(self.held.spec.timeout_s, request_sent=sent))

    async def _stop(self, pump: asyncio.Task[None]) -> None:
        stream_running = not pump.done()
        pump.cancel()
        (outcome,) = await asyncio.gather(pump, return_exceptions=True)
        # The pump reports its own failures through the inbox; raising is a bug of ours.
        if isinstance(outcome, Exception):
            log.error("attempt_task_crashed", task=pump.get_name(), exc_info=outcome)
        # A cancelled stream that closed without another error: the provider stopped for us.
        self._provider_stopped = stream_running and isinstance(outcome, asyncio.CancelledError)

    async def _flushed(self) -> bool:
        """Flush; False when the write was refused because the attempt lost its job."""
        try:
            await self._flush()
        except Fenced:
            return False
        return True

    async def _flush(self) -> None:
        """Write pending deltas (a `token` event per chunk); on a lost connection keep them."""
        chunks = self._coalescer.take()
        if not chunks:
            return
        try:
            await self._tokens.write(chunks)
        except db.DISCONNECTS as exc:
            log.warning("token_flush_failed", error=str(exc) or type(exc).__name__)
            self._coalescer.put_back(chunks, asyncio.get_running_loop().time())

    # --- settling the outcome ---

    async def _settle_shielded(self, ending: Ending) -> AttemptResult:
        # The outcome is one transaction that a second cancel must not cut in half; the task
        # finishes even if this await is abandoned.
        self.settling = asyncio.create_task(
            self._settle(ending), name=f"settle:{self.held.job_id}:{self.held.attempt}"
        )
        return await asyncio.shield(self.settling)

    async def _settle(self, ending: Ending) -> AttemptResult:
        if isinstance(ending, LeaseLost):
            log.info("attempt_fenced", reason=ending.reason)
            return "fenced"
        try:
            chunks = self._coalescer.take()
            # A success appends its last chunk in its own statement, one commit instead of two.
            # After a write in doubt the text is reconciled with the log first (TokenLog); more
            # than one chunk is written as such, each its own bounded event.
            rides_along = (
                isinstance(ending, StreamEnded) and not self._tokens.in_doubt and len(chunks) < 2
            )
            chunk = "".join(chunks)
            if chunks and not rides_along:
                # The append fence admits `cancelling` too: a refusal here means we lost the job.
                await self._persist(lambda: self._tokens.write(chunks))
                chunk = ""
            try:
                return await self._record(ending, chunk)
            except Fenced as refused:
                if isinstance(ending, CancelRequested):
                    raise
                # Refused because the job is `cancelling` under our token? Then the cancel wins
                # (a cancelled job never turns succeeded), with every token we had in its log.
                # Otherwise we were fenced out.
                try:
                    if chunk:
                        await self._persist(lambda: self._tokens.write([chunk]))
                    return await self._confirm_cancel()
                except Fenced:
                    raise refused from None
        except Fenced as exc:
            log.info("attempt_fenced", reason=str(exc))
            return "fenced"
        except LeaseExpired as exc:
            log.warning("attempt_abandoned", reason=str(exc))
            return "abandoned"

    async def _record(
        self, ending: StreamEnded | StreamFailed | CancelRequested | Interrupted, last_chunk: str
    ) -> AttemptResult:
        match ending:
            case StreamEnded():
                return await self._succeed(last_chunk)
            case StreamFailed(failure=failure):
                return await self._fail(failure)
            case CancelRequested():
                return await self._confirm_cancel()
            case Interrupted():
                return await self._hand_back()

    async def _succeed(self, last_chunk: str) -> AttemptResult:
        usage = self._usage_so_far()
        text = self._coalescer.output
        success = attempts.Success(self.held, text, usage, last_chunk)
        await self._persist(lambda: self._write_success(success))
        log.info("attempt_succeeded", status="succeeded", **_usage_fields(usage))
        return "succeeded"

    async def _fail(self, failure: Failure) -> AttemptResult:
        held = self.held
        decision = retry.decide(
            failure.kind,
            retry_after_s=failure.retry_after_s,
            retry_unknown=held.spec.retry_unknown,
            exhausted=held.exhausted,
            attempt=held.counted_attempts,
            backoff=retry.Backoff(self._settings.backoff_base_s, self._settings.backoff_max_s),
            rng=self._rng,
        )
        if failure.kind == "rate_limited":
            # Every worker backs off, for as long as the provider asked, or when it did not say,
            # for as long as this job waits.
            pause_s = failure.retry_after_s
            if pause_s is None:
                pause_s = decision.delay_s
            if pause_s > 0:
                await self._pause_provider(pause_s)
        # Refused before any work, or never sent: the provider billed nothing. Otherwise it may
        # have (a stream that broke, or a known failure after output), and unless it told us the
        # usage we only have our estimate.
        if self._usage is not None:
            usage = self._usage
        elif failure.billed_nothing and self._coalescer.deltas == 0:
            usage = Usage(cost_usd=Decimal(0), cost_known=True)
        else:
            usage = self._estimated_usage()
        await self._persist(
            lambda: attempts.fail(
                self._pool,
                held,
                action=decision.action,
                outcome=decision.outcome,
                error=failure.to_json(),
                usage=usage,
                retry_in_s=decision.delay_s,
                clock=self._clock,
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

    async def _pause_provider(self, seconds: float) -> None:
        # Before the requeue's NOTIFY wakes other workers, so that they see the pause.
        try:
            until = await pauses.pause(self._pool, self.held.provider, seconds, self._clock)
        except db.DISCONNECTS as exc:
            # The job's own retry still waits out Retry-After; only the others may hit the 429.
            log.warning("provider_pause_failed", error=str(exc) or type(exc).__name__)
            return
        log.info("provider_paused", provider=self.held.provider, until=until.isoformat())

    async def _confirm_cancel(self) -> AttemptResult:
        usage = self._usage_so_far()
        await self._persist(
            lambda: attempts.confirm_cancel(
                self._pool,
                self.held,
                usage,
                self._clock,
                provider_confirmed=self._provider_stopped,
            )
        )
        log.info(
            "attempt_cancelled",
            status="cancelled",
            provider_confirmed=self._provider_stopped,
            **_usage_fields(usage),
        )
        return "cancelled"

    async def _hand_back(self) -> AttemptResult:
        usage = self._usage_so_far()
        await self._persist(lambda: attempts.hand_back(self._pool, self.held, usage, self._clock))
        log.info("attempt_handed_back", status="queued", **_usage_fields(usage))
        return "interrupted"

    def _usage_so_far(self) -> Usage:
        """The provider's own usage once it sent it; until then our estimate, flagged as such."""
        return self._usage or self._estimated_usage()

    def _estimated_usage(self) -> Usage:
        produced = self._coalescer.deltas
        return Usage(
            output_tokens=produced,
            cost_usd=self._provider.estimate_cost(self._request, produced),
            cost_known=False,
        )

    async def _persist(self, write: Callable[[], Awaitable[T]]) -> T:
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


async def _close(stream: object) -> None:
    """Close the provider's stream, which closes its request (the Provider protocol)."""
    aclose: Callable[[], Awaitable[object]] | None = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception:
        log.warning("provider_stream_close_failed", exc_info=True)
