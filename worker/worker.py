"""The worker: claims jobs, runs an attempt for each, and hands work back when it stops.

One loop waits for "notified, or poll interval elapsed, or stop" (LISTEN wakes; the table
decides), then reaps expired leases and claims while it has free slots. Every attempt runs in a
named, tracked task. On stop: no more claims, running attempts get `shutdown_grace_s`, then they
are interrupted and hand their job straight back to the queue (worker/drain.py;
docs/design.md, "Shutdown").
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import asyncpg
import structlog

from jobstream import attempts, channels, claims, db, logs, tracing, workers
from jobstream.app import App
from jobstream.claims import Claimed
from jobstream.clock import Clock, DatabaseClock
from jobstream.jobspec import BUILT_IN_JOB
from jobstream.listener import Listener
from jobstream.loading import load_app
from jobstream.settings import Settings
from jobstream.worker import janitor as janitors
from jobstream.worker.attempt import AttemptRunner
from jobstream.worker.completions import Completions
from jobstream.worker.drain import Running, drain
from jobstream.worker.journal_writes import Journals
from jobstream.worker.lease import Leases
from jobstream.worker.outcome import AttemptResult
from jobstream.worker.providers.base import Provider
from jobstream.worker.providers.registry import (
    build_providers,
    close_providers,
    prepare_providers,
)
from jobstream.worker.token_writes import TokenWrites
from jobstream.worker.webhooks import WebhookSender
from jobstream.workers import WorkerProcess

log = structlog.get_logger(__name__)

# Claims one worker has under way at once (each for the slots free when it started).
CLAIMS_IN_FLIGHT = 2


class Worker:
    def __init__(
        self,
        settings: Settings,
        *,
        pool: asyncpg.Pool | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        providers: Mapping[str, Provider] | None = None,
        app: App | None = None,
    ) -> None:
        """`app` holds the jobs this worker runs besides the built-in one (None: the app
        JOBSTREAM_APP names, if any)."""
        if settings.database_url is None:
            raise ValueError("the worker needs settings.database_url (DATABASE_URL)")
        self._settings = settings
        self._url = settings.database_url
        # LISTEN needs a session: the direct URL when DATABASE_URL is a transaction pooler.
        self._session_url = settings.session_database_url or settings.database_url
        self._pool = pool
        self._owns_pool = pool is None
        self._clock: Clock = clock or DatabaseClock()
        self._rng = rng or random.Random()
        self._owns_providers = providers is None
        self._providers = dict(providers) if providers is not None else build_providers(settings)
        self._jobs = dict((app if app is not None else load_app(settings.app)).jobs)
        # The names this worker claims: a job of any other name waits for a worker that has it.
        self.job_names = [BUILT_IN_JOB, *sorted(self._jobs)]
        # Plain `def` handlers and steps run here: two threads for every slot (a plain handler
        # and a plain step it runs), so none waits for one with its time limit running (the
        # loop's default pool has min(32, CPUs + 4)).
        self._threads = ThreadPoolExecutor(
            max_workers=2 * settings.worker_concurrency, thread_name_prefix="jobstream-job"
        )
        self.worker_id = settings.worker_id or f"{socket.gethostname()}:{os.getpid()}"
        # Its `workers` row: the slots it adds to the fleet that tenants share (claim_jobs).
        self.process = WorkerProcess.this_process(
            self.worker_id, self.job_names, settings.worker_concurrency
        )
        self._running: dict[tuple[uuid.UUID, int], Running] = {}
        self._wake = asyncio.Event()
        # Wake-ups so far: a claim notes the count when it starts, and one that arrives while it
        # is under way (it may announce a job its snapshot missed) makes another round.
        self._wakes = 0
        self._stopping = asyncio.Event()
        self._stop_now = asyncio.Event()  # a second stop: no grace period
        self._next_reap_at = 0.0  # loop time of the next look for expired leases
        self._claiming = 0  # slots that claims under way may fill
        self._completions: Completions | None = None  # the successes' writer, while running
        self._journals: Journals | None = None  # the steps' journal writer, while running
        self._leases: Leases | None = None  # the attempts' lease renewals, while running
        self._token_writes: TokenWrites | None = None  # the streams' token writer, while running
        self._listener = Listener(
            self._session_url,
            {channels.CHANNEL_JOBS: self._on_runnable, channels.CHANNEL_CANCEL: self._on_cancel},
            on_connect=self._on_listener_connect,
            name=f"jobstream-worker-listener:{self.worker_id}",
        )
        # How this worker's attempts ended: for logs and metrics, and for tests to assert on.
        self.results: Counter[AttemptResult] = Counter()

    # --- what callers and tests can observe or ask ---

    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def listening(self) -> asyncio.Event:
        """Set while the LISTEN connection is up."""
        return self._listener.connected

    def wake(self) -> None:
        """Run a claim round now (a job may have become runnable)."""
        self._wakes += 1
        self._wake.set()

    def stop(self) -> None:
        """Stop claiming and shut down gracefully; safe to call from a signal handler."""
        if not self._stopping.is_set():
            log.info("worker_stopping", running=self.running_count)
        self._stopping.set()
        self.wake()

    def stop_now(self) -> None:
        """Stop at once: running attempts are handed back without waiting out their grace
        period (a second Ctrl-C). Safe to call from a signal handler."""
        self._stop_now.set()
        self.stop()

    # --- the loop ---

    async def run(self) -> None:
        with structlog.contextvars.bound_contextvars(worker_id=self.worker_id):
            # Before any claim: a provider's SDK imported at its first request would stall the
            # event loop (a second and more of CPU for anthropic's) with other attempts running.
            prepare_providers(self._providers)
            if self._pool is None:
                s = self._settings
                # The database may restart between the start-up's schema check and this.
                self._pool = await db.start_with_database(
                    self._url,
                    s.db_connect_timeout_s,
                    lambda: db.create_pool(
                        self._url,
                        min_size=s.db_pool_min,
                        max_size=s.db_pool_max,
                        generic_plans=True,
                        pooler=s.pooled,
                    ),
                )
            pool = self._pool
            try:
                # Through PgBouncer the pool opens while PostgreSQL is down (the pooler answers),
                # and this first statement is the one that meets the restart: wait it out too.
                await db.start_with_database(
                    None,
                    self._settings.db_connect_timeout_s,
                    lambda: workers.register(pool, self.process, self._clock),
                )
            except BaseException:
                if self._owns_pool:
                    await self._pool.close()
                raise
            listener = asyncio.create_task(self._listener.run(), name=f"listener:{self.worker_id}")
            listener.add_done_callback(self._on_listener_done)
            self._completions = Completions(self._pool, self._clock)
            writer = asyncio.create_task(
                self._completions.run(), name=f"completions:{self.worker_id}"
            )
            writer.add_done_callback(self._on_writer_done)
            self._journals = journals = Journals(self._pool)
            journal_writer = asyncio.create_task(
                journals.run(), name=f"step-journals:{self.worker_id}"
            )
            journal_writer.add_done_callback(self._on_writer_done)
            self._leases = Leases(
                self._pool, worker=self.process, lease_s=self._settings.lease_s, clock=self._clock
            )
            renewals = asyncio.create_task(self._leases.run(), name=f"leases:{self.worker_id}")
            renewals.add_done_callback(self._on_renewals_done)
            self._token_writes = TokenWrites(
                self._pool, min_interval_s=self._settings.token_write_interval_s
            )
            token_writer = asyncio.create_task(
                self._token_writes.run(), name=f"token-writes:{self.worker_id}"
            )
            token_writer.add_done_callback(self._on_writer_done)
            sender = WebhookSender(self._pool, self._settings, clock=self._clock, rng=self._rng)
            webhooks = asyncio.create_task(sender.run(), name=f"webhooks:{self.worker_id}")
            webhooks.add_done_callback(self._on_webhooks_done)
            cleaner = janitors.Janitor(self._pool, self._settings, clock=self._clock)
            janitor = asyncio.create_task(cleaner.run(), name=f"janitor:{self.worker_id}")
            janitor.add_done_callback(janitors.watch)
            log.info(
                "worker_started",
                providers=sorted(self._providers),
                jobs=self.job_names,
                concurrency=self._settings.worker_concurrency,
                provider_limits=self._settings.provider_limits,
            )
            grace = self._settings.shutdown_grace_s
            try:
                await self._claim_loop(self._pool)
            except asyncio.CancelledError:
                grace = 0.0  # cancelled, not stopped: no time to wait, hand back at once
                raise
            finally:
                await drain(
                    list(self._running.values()), grace, self._stop_now, name=self.worker_id
                )
                # After the drain: the settling attempts' successes go through the writer, and
                # the steps of those that succeeded are still being journaled.
                if not self._stop_now.is_set():
                    await journals.settle(grace)
                writer.cancel()
                journal_writer.cancel()
                token_writer.cancel()
                renewals.cancel()
                listener.cancel()
                # An interrupted delivery stays claimed until its hold runs out, then is retried.
                webhooks.cancel()
                janitor.cancel()  # a batch under way rolls back; the next janitor redoes it
                await asyncio.gather(
                    writer,
                    journal_writer,
                    token_writer,
                    renewals,
                    listener,
                    webhooks,
                    janitor,
                    return_exceptions=True,
                )
                # Its attempts are handed back: its slots leave the fleet now.
                await self._stopped(self._pool)
                if self._owns_pool:
                    await self._pool.close()
                if self._owns_providers:
                    await close_providers(self._providers)
                # A handler's thread still running past the hand-back is left to finish; its
                # writes are refused (its attempt ended).
                self._threads.shutdown(wait=False, cancel_futures=True)
                log.info("worker_stopped", results=dict(self.results))

    async def _stopped(self, pool: asyncpg.Pool) -> None:
        try:
            # Bounded: a database that does not answer must not hold up the exit; the row then
            # stops counting a lease after its last heartbeat.
            async with asyncio.timeout(self._settings.lease_s / 3):
                await workers.stopped(pool, self.worker_id, self._clock)
        except Exception as exc:
            log.warning("worker_stop_not_recorded", error=str(exc) or type(exc).__name__)

    async def _claim_loop(self, pool: asyncpg.Pool) -> None:
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                await self._round(pool, in_flight)
                try:
                    async with asyncio.timeout(self._settings.poll_interval_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass  # the polling fallback: a NOTIFY may have been lost
                await self._gather_free_slots()
        finally:
            # A claim under way finishes and starts its attempts, so that the drain that
            # follows hands their jobs back rather than leave them to lease expiry.
            if in_flight:
                await asyncio.wait(in_flight)

    async def _gather_free_slots(self) -> None:
        """A busy worker waits a moment for more slots to free before it claims.

        Attempts end one at a time; claiming at each end would cost a claim transaction per job.
        While at least half the slots are busy, a short wait lets one claim fill several.
        """
        gather_s = self._settings.claim_gather_s
        concurrency = self._settings.worker_concurrency
        if gather_s <= 0 or (self.running_count + self._claiming) * 2 < concurrency:
            return
        try:
            async with asyncio.timeout(gather_s):
                await self._stopping.wait()
        except TimeoutError:
            pass

    async def _round(self, pool: asyncpg.Pool, in_flight: set[asyncio.Task[None]]) -> None:
        # Expired leases are rare; a round is as frequent as a finished attempt. Look for them
        # once per poll interval, not on every round of a busy worker.
        now = asyncio.get_running_loop().time()
        if now >= self._next_reap_at:
            self._next_reap_at = now + self._settings.poll_interval_s
            try:
                reaped = await attempts.reap_expired(pool, self._clock)
                if reaped:
                    log.info("leases_reaped", count=reaped)
            except db.DISCONNECTS as exc:
                log.warning("database_unreachable", error=str(exc) or type(exc).__name__)
            except Exception:
                log.exception("reap_failed")
        # One round trip claims a batch for every free slot. A claim is several round trips
        # (locks, the claim, the tenants' recount, the commit), so a second may start while one
        # is under way, for the slots freed meanwhile: claiming never waits on one transaction.
        free = self._settings.worker_concurrency - self.running_count - self._claiming
        if free > 0 and len(in_flight) < CLAIMS_IN_FLIGHT and not self._stopping.is_set():
            self._claiming += free
            task = asyncio.create_task(self._claim(pool, free), name=f"claim:{self.worker_id}")
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)

    async def _claim(self, pool: asyncpg.Pool, slots: int) -> None:
        """Claim up to `slots` jobs and start an attempt for each."""
        batch: list[Claimed] = []
        wakes = self._wakes
        try:
            claimed_at = asyncio.get_running_loop().time()
            traced_from = time.time_ns() if tracing.active() else 0
            batch = await claims.claim_batch(
                pool,
                providers=list(self._providers),
                worker_id=self.worker_id,
                lease_s=self._settings.lease_s,
                clock=self._clock,
                limits=self._settings.provider_limits,
                max_jobs=slots,
                names=self.job_names,
                max_share=self._settings.tenant_max_share,
            )
            if traced_from:
                traced_to = time.time_ns()
                for held in batch:
                    tracing.claim_span(held, traced_from, traced_to, len(batch))
            for held in batch:
                self._start(pool, held, claimed_at)
        except db.DISCONNECTS as exc:
            # The next round retries; the pool reconnects on its own.
            log.warning("database_unreachable", error=str(exc) or type(exc).__name__)
        except Exception:
            log.exception("claim_round_failed")
        finally:
            self._claiming -= slots
        if batch or self._wakes != wakes:
            # A batch can come back short while tenants take turns: claim again until one is
            # empty or the slots are full. And a wake-up that came while this claim was under way
            # found its slots reserved, so no claim answered it: a job it announced may have
            # committed after this claim's snapshot (test_worker_listener.py lost one so, about
            # one run in twenty, and waited for the next poll).
            self._wake.set()

    def _start(self, pool: asyncpg.Pool, held: Claimed, claimed_at: float) -> None:
        assert self._leases is not None and self._token_writes is not None, (
            "attempts start only while the worker runs"
        )
        runner = AttemptRunner(
            pool,
            held,
            self._providers,
            self._settings,
            clock=self._clock,
            rng=self._rng,
            leases=self._leases,
            claimed_at=claimed_at,
            write_success=self._completions.accept if self._completions else None,
            token_writes=self._token_writes,
            job=self._jobs.get(held.job_name),
            threads=self._threads,
            journals=self._journals,
        )
        key = (held.job_id, held.attempt)
        # The attempt's log lines carry its job, attempt and run token: set in the context the
        # attempt's task copies, and only formatted into lines that are written.
        bound = logs.bind_attempt(held.job_id, held.attempt, held.run_token)
        try:
            task = asyncio.create_task(
                self._run_attempt(key, runner), name=f"attempt:{held.job_id}:{held.attempt}"
            )
        finally:
            logs.unbind_attempt(bound)
        self._running[key] = Running(runner, task)

    async def _run_attempt(self, key: tuple[uuid.UUID, int], runner: AttemptRunner) -> None:
        try:
            self.results[await runner.run()] += 1
        except Exception:
            # The runner records every outcome it can; this is a bug. The job is left to the
            # reaper, which settles it once the lease runs out.
            log.exception("attempt_crashed")
        finally:
            del self._running[key]
            self.wake()  # a slot is free

    # --- wake-ups from the listener ---

    def _on_runnable(self, provider: str) -> None:
        if provider in self._providers:
            self.wake()

    def _on_cancel(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            log.warning("bad_cancel_notification", payload=payload[:100])
            return
        for (running_job, _), running in self._running.items():
            if running_job == job_id:
                # The row decides: the runner renews now and acts on the status it reads.
                running.runner.check_job()

    def _on_listener_connect(self) -> None:
        # Notifications sent while we were not listening are gone: look at the tables again.
        self.wake()
        for running in self._running.values():
            running.runner.check_job()

    def _on_webhooks_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        # The sender survives every failed round; ending on its own is a bug. Jobs still run
        # and their outbox rows wait for the next worker, so log it rather than stop.
        log.error("webhook_sender_died", exc_info=task.exception())

    def _on_renewals_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        # The renewals survive every failed round; ending on their own is a bug, and every
        # attempt would lose its lease: stop rather than limp on.
        log.error("lease_renewals_died", exc_info=task.exception())
        self.stop()

    def _on_writer_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        # The writers (successes, token chunks) survive every failed write; ending on their own
        # is a bug, and attempts would wait for them until their leases ran out: stop rather
        # than limp on.
        log.error("writer_died", task=task.get_name(), exc_info=task.exception())
        self.stop()

    def _on_listener_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        # The listener retries everything it can; ending on its own is a bug. Without it the
        # worker would miss cancels for up to a third of a lease: stop rather than limp on.
        log.error("listener_died", exc_info=task.exception())
        self.stop()
