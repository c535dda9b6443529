"""One attempt at a job: run its code, persist the tokens, settle the outcome.

The job's code is the built-in job's one provider stream, or an `@app.job` handler with its
context (worker/handlers.py); either runs in the pump task. The pump adds the stream's deltas
(and a handler's `ctx.emit` text) to the attempt's coalescer itself (a delta through a
queue to the runner was a task switch and a timer per token, and at 50 tokens/s nearly every
delta came alone), and the worker's token writer takes the due text from there as it puts each
write together (worker/token_pull.py): a flush that goes well wakes nobody. Three sources feed
one inbox with the attempt's endings: the pump (the stream's end or failure), the worker's lease
renewals (a cancel request, or the lease lost; worker/lease.py) and the worker (shutdown); a
token write that went wrong posts there too, or wakes the runner to write by itself until its
log is sure again. At the first ending the runner stops the pump, waits for its text's write in
flight, leaves the lease renewals and records exactly one outcome (worker/outcome.py), flushing
first so that the log holds every token before the status changes (docs/design.md, "Token writes").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping
from concurrent.futures import Executor

import asyncpg
import structlog

from jobstream import db, tracing
from jobstream.app import JobDefinition
from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.errors import Fenced, ProviderError
from jobstream.settings import Settings
from jobstream.worker.coalescer import Coalescer
from jobstream.worker.failure import Failure
from jobstream.worker.handlers import HandlerContext, run_definition
from jobstream.worker.inbox import (
    CancelRequested,
    Ending,
    Inbox,
    Interrupted,
    LeaseLost,
    StreamEnded,
    StreamFailed,
)
from jobstream.worker.job_writes import JobWrites
from jobstream.worker.journal_writes import Journals
from jobstream.worker.lease import Lease, Leases
from jobstream.worker.llm_calls import LLMCalls
from jobstream.worker.outcome import AttemptResult, LeaseExpired, OutcomeRecorder, SuccessWriter
from jobstream.worker.previous import Previous
from jobstream.worker.providers.base import Provider, ProviderRequest
from jobstream.worker.spend import Spend
from jobstream.worker.step_runs import Running
from jobstream.worker.steps import Steps
from jobstream.worker.token_log import TokenLog
from jobstream.worker.token_pull import TokenPull
from jobstream.worker.token_writes import TokenWrites

log = structlog.get_logger(__name__)


class AttemptRunner:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        providers: Mapping[str, Provider],
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random,
        leases: Leases,
        claimed_at: float,
        write_success: SuccessWriter | None = None,
        token_writes: TokenWrites,
        job: JobDefinition | None = None,
        threads: Executor | None = None,
        journals: Journals | None = None,
    ) -> None:
        """`job` is the `@app.job` definition the attempt runs; None for the built-in job,
        whose one call goes to `providers[held.provider]`. `threads` runs plain `def`
        handlers and steps (None: the loop's default executor)."""
        self.held = held
        self._pool = pool
        self._job = job
        self._inbox = Inbox()
        self._coalescer = Coalescer(
            interval_s=settings.flush_interval_s, max_bytes=settings.flush_bytes
        )
        # The worker's group writer (worker/token_writes.py): it takes the due text itself
        # while the stream runs (worker/token_pull.py); the runner writes through it when its
        # log is in doubt, and as it settles.
        self._tokens = TokenLog(pool, held, writer=token_writes.append)
        self._pull = TokenPull(self._coalescer, self._tokens, self._inbox, token_writes)
        # Renewed with the worker's other attempts' from now on, until the stream ends.
        self._lease: Lease = leases.hold(held, self._inbox, claimed_at=claimed_at)
        self._spend = Spend()
        self._providers = providers
        self._previous = previous = Previous(pool, held)
        self._outcome = OutcomeRecorder(
            pool,
            held,
            settings,
            clock=clock,
            rng=rng,
            spend=self._spend,
            previous=previous,
            lease=self._lease,
            produced=self._coalescer,
            write_success=write_success,
        )
        running = Running()
        self._writes = writes = JobWrites(
            pool,
            held,
            coalescer=self._coalescer,
            tokens=self._tokens,
            pull=self._pull,
            inbox=self._inbox,
            outcome=self._outcome,
            running=running,
        )
        self._llm = LLMCalls(
            providers,
            default_provider=held.provider,
            attempt=held.attempt,
            spend=self._spend,
            writes=writes,
            previous=previous,
            max_cost_usd=held.spec.max_cost_usd,
        )
        # A handler's context and steps: none for the built-in job, whose attempts are the
        # busiest (a no-op drain spends its worker's time building each attempt's parts).
        self._ctx: HandlerContext | None = None
        if job is not None:
            steps = Steps(
                pool, held, self._spend, self._inbox, writes, running, threads=threads,
                journals=journals,
            )  # fmt: skip
            self._ctx = HandlerContext(held, self._llm, writes, steps, previous, threads=threads)
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
        if not tracing.active():
            return await self._run()
        # Current for the whole attempt: the pump's task copies the context, so the provider
        # calls and steps of the job's code are this span's children.
        with tracing.attempt_span(self.held) as span:
            result = await self._run()
            span.set_attribute("jobstream.attempt.result", result)
            if result not in ("succeeded", "interrupted"):
                tracing.failed(span, result)
            return result

    async def _run(self) -> AttemptResult:
        held = self.held
        # One log line per change of the job's status: this one, and the settling one.
        log.info(
            "attempt_started",
            status="running",
            job=held.job_name,
            provider=held.provider,
            model=held.spec.model,
        )
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
        pull = self._pull
        pull.attach()
        try:
            while True:
                # While the worker's writer takes the text, the runner waits for an ending, the
                # time limit, or word that a write went wrong (its log in doubt): then it writes
                # by itself, when the text falls due, until the log is sure again.
                due_at = coalescer.due_at
                if not self._tokens.in_doubt:
                    wait_until = give_up_at
                elif coalescer.flush_due(loop.time()):
                    wait_until = 0.0  # a chunk filled while the last flush was written
                else:
                    wait_until = give_up_at if due_at is None else min(due_at, give_up_at)
                endings = await self._inbox.take(wait_until)
                if endings:
                    if isinstance(endings[0], CancelRequested) and self._ctx is not None:
                        self._ctx.cancelled.set()
                    return endings[0]  # its pending deltas are written as it settles
                now = loop.time()
                if now >= give_up_at:
                    return self._timed_out()
                if not self._tokens.in_doubt:
                    continue
                # One write for all that is due, however many chunks (events of at most
                # flush_bytes each) it holds.
                if coalescer.flush_due(now):
                    async with self._writes.alone:
                        with pull.writing_alone():
                            if not await self._flushed():
                                return LeaseLost("a token write was refused: the job moved on")
                pull.pending(loop.time())  # the log is sure again: back to the writer
        finally:
            pull.detach()
            self._lease.release()
            await self._stop(pump)
            self._writes.end()  # a handler still running in a thread can write nothing more
            if self._ctx is not None:
                self._ctx.end()
            await pull.idle()  # its last write's answer, before settling reads the log

    async def _pump(self) -> None:
        """Run the job's code; its end or failure goes to the inbox."""
        ending: Ending
        try:
            if self._job is None:
                await self._built_in()
                ending = StreamEnded()
            else:
                assert self._ctx is not None
                output = await run_definition(self._job, self.held, self._ctx)
                ending = StreamEnded(output)
        except ProviderError as exc:
            ending = StreamFailed(Failure.from_provider(exc))
        except TimeoutError as exc:
            # A timeout of the provider's own making counts as the attempt's; a job's own code
            # that times out at something of its own raised an error like any other.
            if self._job is None:
                ending = self._timed_out()
            else:
                ending = StreamFailed(Failure.of_handler(exc))
        except Exception as exc:
            if self._job is None:
                log.exception("provider_stream_crashed")
                ending = StreamFailed(Failure.internal(exc))
            else:
                failure = Failure.of_handler(exc)
                log.info("job_code_raised", error_class=failure.error_class, error=failure.message)
                ending = StreamFailed(failure)
        # Always posted (unless we were cancelled): the runner's loop waits for it.
        self._inbox.put_nowait(ending)

    async def _built_in(self) -> None:
        """The built-in `llm` job: one call, the job's prompt to its provider."""
        spec = self.held.spec
        request = ProviderRequest(
            prompt=spec.prompt,
            model=spec.model,
            max_tokens=spec.max_tokens,
            attempt=self.held.attempt,
            simulate=spec.simulate,
            messages=spec.messages,
            instructions=spec.instructions,
            sampling=spec.sampling,
        )
        name = self.held.provider
        await self._llm.run(name, self._providers[name], request)

    def _timed_out(self) -> StreamFailed:
        sent = self._spend.request_sent
        return StreamFailed(Failure.timed_out(self.held.spec.timeout_s, request_sent=sent))

    async def _stop(self, pump: asyncio.Task[None]) -> None:
        stream_running = not pump.done()
        outcome: BaseException | None
        if stream_running:
            pump.cancel()
            (outcome,) = await asyncio.gather(pump, return_exceptions=True)
        else:
            # The usual end: the pump posted the stream's end and finished. No gather (a
            # future and callbacks per attempt) for a task that is done.
            outcome = pump.exception() if not pump.cancelled() else asyncio.CancelledError()
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
        try:
            await self._writes.flush_or_keep()
        except db.DISCONNECTS as exc:
            log.warning("token_flush_failed", error=str(exc) or type(exc).__name__)

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
        if not isinstance(ending, StreamEnded) and self._ctx is not None:
            # The job may run again: its finished steps' journals first, for the retry to find.
            await self._ctx.steps_landed()
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
                await self._outcome.persist(lambda: self._tokens.write(chunks))
                chunk = ""
            try:
                return await self._outcome.record(
                    ending, chunk, provider_stopped=self._provider_stopped,
                    text_at=self._tokens.durable,
                )  # fmt: skip
            except Fenced as refused:
                if isinstance(ending, CancelRequested):
                    raise
                # Refused because the job is `cancelling` under our token? Then the cancel wins
                # (a cancelled job never turns succeeded), with every token we had in its log.
                # Or a success whose last chunk found the log past the offset it expected (a
                # write in doubt that landed late): the chunk is written as any other, which
                # reconciles it with the log, and the success sent again without it.
                # Otherwise we were fenced out.
                try:
                    if chunk:
                        await self._outcome.persist(lambda: self._tokens.write([chunk]))
                        if isinstance(ending, StreamEnded):
                            with contextlib.suppress(Fenced):  # cancelling: confirmed below
                                return await self._outcome.record(
                                    ending, "", provider_stopped=self._provider_stopped
                                )
                    return await self._outcome.confirm_cancel(
                        provider_stopped=self._provider_stopped
                    )
                except Fenced:
                    raise refused from None
        except Fenced as exc:
            log.info("attempt_fenced", reason=str(exc))
            return "fenced"
        except LeaseExpired as exc:
            log.warning("attempt_abandoned", reason=str(exc))
            return "abandoned"
